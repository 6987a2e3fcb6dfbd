"""The ``dspark-harvest`` command: one module per subcommand, what they share, the output channel."""

from .parser import main

__all__ = ["main"]
