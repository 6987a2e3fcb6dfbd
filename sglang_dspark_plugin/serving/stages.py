"""What sglang must keep of a plan at each later stage of a launch (sglang-free): the plan decides
once (``plan.make_plan``); these refuse, with the plan's reasons, where sglang's own handling, its worker
factory, its DSPARK handler or its ``req_to_token`` pool did otherwise. The glue calls each at its stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import GeometryError
from .bundled import same_path
from .context_edge import reserve_headroom, row_refusal
from .refusal import ALGORITHM

if TYPE_CHECKING:
    from .plan import ServePlan


def check_kept(plan: ServePlan, resolved: dict[str, Any]) -> None:
    """After sglang's own speculative handling: refuse where the builtin changed what the plan
    declared (``resolved``: the server arguments as sglang resolved them)."""
    changed = {
        k: (resolved[k], v) for k, v in plan.declared_args.items() if k in resolved and resolved[k] != v
    }
    if changed:
        raise GeometryError(
            f"{ALGORITHM}: sglang's {plan.builtin} handling changed what the {plan.harvest.name()} "
            f"harvest of {plan.cfg.path} needs: "
            + ", ".join(f"{k} = {a!r}, needs {b!r}" for k, (a, b) in changed.items())
            + "; this sglang version is not supported (run `dspark-harvest doctor`).",
            where=", ".join(changed),
        )


def check_builtin(plan: ServePlan, building: str) -> None:
    """Refuse when sglang builds a ``building`` worker for a launch this plan serves as another."""
    if building != plan.builtin:
        raise GeometryError(
            f"{ALGORITHM}: sglang is building a {building} worker but the plan of this launch serves "
            f"{plan.cfg.path} as {plan.builtin} (the {plan.harvest.name()} harvest); refusing rather "
            "than serving the wrong convention. Pass sglang's resolved server args on unchanged.",
            where="speculative_algorithm",
        )


def check_served_draft(plan: ServePlan, served: Any) -> None:
    """Refuse when sglang's DSPARK handler resolved a bundled draft other than the one the plan
    censused (the plan leaves that path to it); a draft the launch named is sglang's as given."""
    bundled = plan.bundled
    if bundled is None or same_path(served, bundled.draft) or same_path(served, plan.cfg.path):
        return
    raise GeometryError(
        f"{ALGORITHM}: sglang resolved the draft of this launch to {served!r}, but the plan censused "
        f"the {bundled.describe()} at {plan.cfg.path}; refusing rather than serving a draft whose "
        "training convention was not read. Pass --speculative-draft-model-path explicitly.",
        where="--speculative-draft-model-path",
    )


def require_row_headroom(plan: ServePlan, headroom: int, page_size: int) -> None:
    """Refuse a launch whose ``req_to_token`` rows hold less than every decode round's reserve."""
    needed = reserve_headroom(plan.geometry.verify_window, page_size)
    if headroom < needed:
        raise row_refusal(plan.geometry.verify_window, page_size, headroom, needed)


__all__ = ["check_builtin", "check_kept", "check_served_draft", "require_row_headroom"]
