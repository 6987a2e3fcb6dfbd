"""What one sglang release serves for a launch, as ``make_plan`` decides it (sglang-free).

``inspect`` reports this per release, and a launch runs the very same ``make_plan``, so the two cannot
disagree: a refusal is the plan's own (its kind, where and message), a served draft is the plan's
builtin, query layout and draft class. A draft whose config.json gives no block size is refused by the
launch until a block-size flag gives one; its verdict says so (``needs``), from a plan made with that
flag, so a draft refused for another reason is still called refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..census.architectures import SGLANG_DENSE_DSPARK
from ..errors import DsparkHarvestError, MissingBlockSizeError
from .layout import DSPARK, Arm
from .plan import ServePlan, make_plan
from .refusal import ALGORITHM
from .request import DFLASH_BLOCK_FLAG, DSPARK_BLOCK_FLAG, LaunchRequest, SglangSupport

TRIAL_BLOCK_SIZE = 8
"""The block a verdict tries where config.json gives none: the plan's other checks do not depend on it."""


@dataclass(frozen=True)
class Servability:
    """How one sglang release serves a launch: its builtin and DSPARK layout, or why it refuses."""

    version: str
    arm: Arm | None  # the plan's arm (builtin, query layout); None: this release refuses the launch
    harvest: str | None  # the plan's harvest ("dflash", "dspark"); None when refused
    how: str  # the class that builds it, or the plan's refusal
    needs: str | None = None  # a flag the launch must add (the block size config.json leaves out)
    kind: str | None = None  # the refusal's kind ("unsupported", "invalid", ...)
    where: str | None = None  # the refusal's where: the key, flag or file at fault
    advice: tuple[str, ...] = field(default=(), compare=False)  # the WARNINGs the plan would log

    @property
    def servable(self) -> bool:
        """Whether this release serves the launch (with ``needs`` where one is named)."""
        return self.arm is not None

    @property
    def builtin(self) -> str | None:
        """``DFLASH``, ``DSPARK``; None when refused."""
        return None if self.arm is None else self.arm.builtin

    @property
    def sample_from_anchor(self) -> bool | None:
        """DSPARK's query layout; None for DFLASH or when refused."""
        return None if self.arm is None else self.arm.sample_from_anchor

    def what(self) -> str:
        """``DSPARK``, ``DSPARK, sample_from_anchor=false``, ``DFLASH`` (with the flag it needs) or
        ``cannot serve``."""
        if self.arm is None:
            return "cannot serve"
        return self.arm.describe() + (f" with {self.needs} N" if self.needs else "")

    def describe(self) -> str:
        """``what()`` and how."""
        return f"{self.what()} ({self.how})"

    def to_json(self) -> dict[str, Any]:
        """``{version, builtin, harvest, sample_from_anchor, servable, how, needs, kind, where}``."""
        return {
            "version": self.version,
            "builtin": self.builtin,
            "harvest": self.harvest,
            "sample_from_anchor": self.sample_from_anchor,
            "servable": self.servable,
            "how": self.how,
            "needs": self.needs,
            "kind": self.kind,
            "where": self.where,
        }


def how_served(plan: ServePlan) -> str:
    """The draft class and Markov head a plan serves, in a phrase."""
    arch = plan.architectures[0] if plan.architectures else "(no architecture)"
    if plan.bundled is not None:
        return f"the {plan.bundled.describe()}, loaded as {arch}"
    head = plan.cfg.markov_head
    if plan.builtin != DSPARK:
        if arch in SGLANG_DENSE_DSPARK:
            return f"{arch} without a Markov head loads as DFlashDraftModel"
        return f"sglang {plan.support.version}'s own {arch}"
    if plan.layout.mask_fill_dspark:
        return f"{arch} keeps its rank-{head.rank if head else 0} Markov head"
    kept = (
        "a zero Markov head: the checkpoint has none" if head is None else f"its rank-{head.rank} Markov head"
    )
    return f"the dspark arm builds {arch} as sglang's dense DSpark, with {kept}"


def _served(plan: ServePlan, needs: str | None) -> Servability:
    version, harvest = plan.support.version, plan.resolution.harvest.name()
    return Servability(version, plan.layout, harvest, how_served(plan), needs, advice=plan.advice)


def _refused(version: str, err: DsparkHarvestError) -> Servability:
    why = err.message.removeprefix(f"{ALGORITHM}: ")
    return Servability(version, None, None, why, kind=err.kind, where=err.where)


def release_verdict(request: LaunchRequest, support: SglangSupport) -> Servability:
    """What ``support``'s release serves for ``request``: ``make_plan``'s plan or refusal."""
    try:
        return _served(make_plan(request, support), None)
    except MissingBlockSizeError as missing:
        flag = missing.where
        if flag == DFLASH_BLOCK_FLAG:
            trial = dataclasses.replace(request, dflash_block_size=TRIAL_BLOCK_SIZE)
        elif flag == DSPARK_BLOCK_FLAG:
            trial = dataclasses.replace(request, dspark_block_size=TRIAL_BLOCK_SIZE)
        else:
            return _refused(support.version, missing)
        try:
            return _served(make_plan(trial, support), flag)
        except DsparkHarvestError as err:
            return _refused(support.version, err)
    except DsparkHarvestError as err:
        return _refused(support.version, err)


__all__ = ["TRIAL_BLOCK_SIZE", "Servability", "how_served", "release_verdict"]
