"""``dspark-harvest check``, as the CLI registers it; the command lives in the ``check`` package."""

from ..check import *  # noqa: F403  (the check package's public names, ``check.__all__``)
from ..check import __all__ as __all__
