"""The package's version: one definition, read by the package, the manifest and ``--version``."""

__version__ = "0.1.0"
