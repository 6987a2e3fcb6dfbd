"""``check``'s verdicts and the exit code each one gives, so that a pipeline can act on the exit code.

One table: the CLI's exit codes, its ``--help``, the report's ``verdict`` and the README all read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

from ..commands import EXIT_OK, EXIT_REFUSED

Verdict = Literal["serve-as-is", "not-exact", "refused", "contradicts", "inconclusive"]
SERVE_AS_IS, NOT_EXACT, REFUSED, CONTRADICTS, INCONCLUSIVE = get_args(Verdict)

EXIT_NOT_EXACT = 1
EXIT_CONTRADICTS = 3
EXIT_INCONCLUSIVE = 4

# verdict: (exit code, what it means); the order is the overall verdict's precedence, worst first
VERDICTS: dict[Verdict, tuple[int, str]] = {
    REFUSED: (EXIT_REFUSED, "refused: an argument or a checkpoint is wrong (the message says what to fix)"),
    NOT_EXACT: (
        EXIT_NOT_EXACT,
        "a speculative output left the target's own greedy choice by a clear margin (a verify or harvest "
        "bug; near-tie flips of 16-bit rounding are reported, not failed)",
    ),
    CONTRADICTS: (
        EXIT_CONTRADICTS,
        "what DSPARK_HARVEST serves now contradicts the measurement; the report prints the override",
    ),
    INCONCLUSIVE: (
        EXIT_INCONCLUSIVE,
        "the measurement does not decide at the stated confidence (more prompts), or no harvest accepts",
    ),
    SERVE_AS_IS: (
        EXIT_OK,
        "serve as is: what DSPARK_HARVEST serves now is the harvest the measurement picks",
    ),
}


def exit_code(verdict: Verdict) -> int:
    """The exit code of a verdict."""
    return VERDICTS[verdict][0]


def overall(drafter_verdicts: Iterable[Verdict], exact: bool) -> Verdict:
    """The run's verdict: not exact if any output left the target's greedy choice by a clear margin
    (``exact`` is False), else the worst of the drafters' verdicts."""
    seen = set(drafter_verdicts) | ({NOT_EXACT} if not exact else set())
    return next((v for v in VERDICTS if v in seen), SERVE_AS_IS)


def exit_codes_text() -> str:
    """The exit codes, one line each, as ``--help`` and the README print them."""
    ordered = sorted(VERDICTS.items(), key=lambda item: item[1][0])
    return "\n".join(f"  {code}  {name:<13} {meaning}" for name, (code, meaning) in ordered)


__all__ = [
    "Verdict",
    "SERVE_AS_IS",
    "NOT_EXACT",
    "REFUSED",
    "CONTRADICTS",
    "INCONCLUSIVE",
    "EXIT_NOT_EXACT",
    "EXIT_CONTRADICTS",
    "EXIT_INCONCLUSIVE",
    "VERDICTS",
    "exit_code",
    "overall",
    "exit_codes_text",
]
