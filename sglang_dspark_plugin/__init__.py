"""sglang-dspark-plugin: serve DFlash-family block drafters with the harvest convention they were trained for.

Nothing here imports sglang; the sglang glue lives in ``sglang_dspark_plugin.sglang_plugin``.
"""

from . import errors
from .census.draft_config import DflashCfg, Signal
from .errors import *  # noqa: F403  (every error class: ``errors.__all__``)
from .geometry import RoundGeometry, build_manifest
from .harvest import ENV_VAR, DsparkHarvest, Resolution
from .version import __version__

__all__ = [
    "DsparkHarvest",
    "Resolution",
    "ENV_VAR",
    "DflashCfg",
    "Signal",
    "RoundGeometry",
    "build_manifest",
    "__version__",
]
__all__ += errors.__all__
