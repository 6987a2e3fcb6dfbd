"""The ``spec_class`` of ``DSPARK_HARVEST``: registered so sglang accepts the flag, never a serving
route; reached only where the early rewrite could not fire, and it refuses there with the way to launch.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from .resolution import require_plan


class DsparkHarvestSpecAlgo(CustomSpecAlgo):
    """``DSPARK_HARVEST`` as sglang's registry holds it: it refuses where the rewrite did not run."""

    def handle_server_args(self, server_args: Any) -> None:
        """Refuse: the early rewrite to the builtin did not run, so this launch has no plan."""
        require_plan(server_args, f"the registered {self.name} algorithm")


__all__ = ["DsparkHarvestSpecAlgo"]
