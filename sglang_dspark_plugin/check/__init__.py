"""``dspark-harvest check``: measure drafters under both harvests on the reference engine.

``arguments`` checks the command line, ``target`` the target folder (and loads it), ``measure`` runs
every drafter under each harvest side by side, ``report`` is the typed report and its JSON form,
``conclusions`` builds it (recommendation, serving, manifests), ``text``, ``goals`` (the embedded
models' targets, graded) and ``plot`` read it, and ``cli`` ties them into the command.
"""

from .arguments import check_plot_path
from .cli import EXIT_NOT_EXACT, EXIT_OK, EXIT_REFUSED, add_parser, check, run
from .conclusions import build_report, recommend, served_by_sglang
from .goals import TARGET_MATCHED, TARGET_RATIO, TARGET_SPEEDUP, targets
from .measure import Drafter, Run, load_drafter_for, measure
from .plot import plot
from .report import CheckReport
from .target import check_target_files, encode_prompts, load_target_model
from .text import format_report

__all__ = [
    "EXIT_OK",
    "EXIT_NOT_EXACT",
    "EXIT_REFUSED",
    "TARGET_RATIO",
    "TARGET_MATCHED",
    "TARGET_SPEEDUP",
    "CheckReport",
    "Drafter",
    "Run",
    "add_parser",
    "run",
    "check",
    "check_target_files",
    "check_plot_path",
    "load_target_model",
    "load_drafter_for",
    "encode_prompts",
    "served_by_sglang",
    "measure",
    "recommend",
    "build_report",
    "targets",
    "format_report",
    "plot",
]
