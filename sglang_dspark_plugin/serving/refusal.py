"""What a refusal of a ``DSPARK_HARVEST`` launch is (sglang-free): the algorithm's name, the error
sglang shows as an argument error (``ServeRefusal``), the workers' contract refusal, and the glue's own
refusals (a process without a plan, a contract mismatch). Each check that raises one lives with what
it checks: the draft against a release (``servability.check_servable``), the width (``width``), the
target's layers (``target_checkpoint``), disaggregation (``topology``), a bundled draft (``bundled``),
the peer's manifest (``peer``), the context edge (``context_edge``); ``plan.make_plan`` calls them in
one place, before any model loads.
"""

from __future__ import annotations

from ..errors import DsparkHarvestError

ALGORITHM = "DSPARK_HARVEST"
"""The name users pass to ``--speculative-algorithm``."""


class ServeRefusal(DsparkHarvestError, ValueError):
    """A refusal raised while sglang resolves its arguments.

    A ``ValueError``, like sglang's own argument errors, so ``launch_server`` and ``Engine`` end with
    the message as the last line; ``kind`` keeps the class of the typed error it wraps.
    """

    def __init__(self, message: str, *, kind: str = "invalid", where: str | None = None) -> None:
        super().__init__(message, where=where)
        self.kind = kind

    @classmethod
    def wrap(cls, err: DsparkHarvestError) -> ServeRefusal:
        """Re-raise a typed error that is not a ``ValueError`` (census conflict, unsupported drafter)."""
        return cls(f"{ALGORITHM}: {err.message}", kind=err.kind, where=err.where)


SGLANG_FIX = (
    "install a supported sglang (from a checkout of this package: pip install '.[sglang-0523]' or "
    "'.[sglang-0517]') and run `dspark-harvest doctor`"
)


class WorkerContractError(ServeRefusal):
    """The installed sglang lacks a class, method or parameter the workers rely on."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message, kind="unsupported", where=where)


def contract_mismatch(version: str | None, missing: list[tuple[str, str]], outcome: str) -> str:
    """One line: what sglang ``version`` lacks (``(target, problem)`` pairs), what that means for the
    plugin (``outcome``: "NOT registered", "cannot serve"), and the fix."""
    shown = "; ".join(f"{target} ({problem})" for target, problem in missing[:6])
    more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
    return (
        f"sglang-dspark-plugin: {ALGORITHM} {outcome}: sglang {version} lacks what the plugin relies on: "
        f"{shown}{more}; other speculative algorithms are unaffected; {SGLANG_FIX}."
    )


def no_plan(where: str) -> ServeRefusal:
    """The refusal of a ``DSPARK_HARVEST`` process whose server args carry no plan: it never re-derives
    one."""
    return ServeRefusal(
        f"{ALGORITHM}: {where} found no serving plan on its server args, so it cannot know which rows "
        "the drafter was trained for; refusing rather than guessing. The plan is made while sglang "
        "resolves the launch's arguments, which needs the plugin's hooks in place first: launch with "
        "`python -m sglang.launch_server ...` or `sglang.Engine(...)`, or call "
        "`sglang.srt.plugins.load_plugins()` before building ServerArgs yourself, and pass sglang's "
        "resolved server args on unchanged (a rebuild from fields drops the plan).",
        kind="unsupported",
        where="server args",
    )


def as_serve_refusal(err: DsparkHarvestError) -> DsparkHarvestError:
    """``err`` itself when sglang already shows it as an argument error (a ``ValueError``), else wrapped."""
    return err if isinstance(err, ValueError) else ServeRefusal.wrap(err)


__all__ = [
    "ALGORITHM",
    "SGLANG_FIX",
    "ServeRefusal",
    "WorkerContractError",
    "as_serve_refusal",
    "contract_mismatch",
    "no_plan",
]
