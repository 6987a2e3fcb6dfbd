"""What the accept telemetry reports beyond the per-round line: the summary as JSON, the periodic
summary line and the startup line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .settings import level_name

if TYPE_CHECKING:
    from .accept import AcceptTelemetry


def summary_json(t: AcceptTelemetry) -> dict[str, Any]:
    """Everything so far, JSON-able."""
    return {
        "harvest": t.harvest,
        "source": t.source,
        "gamma": t.gamma,
        "dp_rank": t.dp_rank,
        "rounds": t.rounds,
        "request_rounds": t.request_rounds,
        "accepted_drafts": t.accepted_drafts,
        "mean_accept_length": t.mean_accept_length(),
        "per_position": t.per_position_rates(),
        "accepted_per_position": t.accepted_per_position(),
        "accept_length_histogram": {str(n + 1): c for n, c in enumerate(t.stats.histogram())},
        "window_mean_accept_length": t.window_mean(),
        "alarm_threshold": t.alarm_threshold,
        "alarms_fired": t.alarms_fired,
        "alarms": [a.to_json() for a in t.alarms],
        "invalid_rounds": t.invalid_rounds,
        "elapsed_s": t.elapsed(),
        "settings": t.settings.to_json(),
    }


def summary_line(t: AcceptTelemetry, previous: tuple[int, int, int]) -> str:
    """The summary line: cumulative, and since ``previous`` (rounds, request-rounds, accepted drafts)."""
    rounds0, reqs0, acc0 = previous
    d_reqs = t.request_rounds - reqs0
    interval = "n/a" if d_reqs == 0 else f"{1.0 + (t.accepted_drafts - acc0) / d_reqs:.2f}"
    mean = t.mean_accept_length()
    rates = t.per_position_rates() or []
    window = t.window_mean()
    elapsed = t.elapsed()
    rps = "n/a" if not elapsed else f"{t.rounds / elapsed:.1f}"
    return (
        f"dspark accept summary rounds={t.rounds} request_rounds={t.request_rounds} "
        f"mean_accept_len={'n/a' if mean is None else f'{mean:.2f}'} "
        f"last_{t.rounds - rounds0}_rounds={interval} "
        f"window_mean={'n/a' if window is None else f'{window:.2f}'} "
        f"per_position=[{','.join(f'{r:.2f}' for r in rates)}] "
        f"harvest={t.tag} gamma={t.gamma} rounds_per_s={rps} "
        f"alarms={t.alarms_fired} invalid_rounds={t.invalid_rounds}{t.dp_tag}"
    )


def describe_line(t: AcceptTelemetry) -> str:
    """One startup line: the harvest, gamma and the telemetry settings."""
    s = t.settings
    alarm = (
        "off"
        if not t.alarm.on
        else f"mean<{t.alarm_threshold:.2f} over {s.alarm_window} rounds after {s.alarm_warmup}"
    )
    return (
        f"dspark accept telemetry: harvest={t.tag} gamma={t.gamma} "
        f"per_round_level={level_name(s.accept_log_level)} summary_every={s.summary_every} "
        f"alarm={alarm} metrics={'on' if t.metrics is not None else 'off'}{t.dp_tag}"
    )


def invalid_round_line(t: AcceptTelemetry, index: int, bad: list[Any]) -> str:
    """The ERROR line for a round whose counts (``bad``: the first offenders) are outside [0, gamma]."""
    return (
        f"dspark accept round={index}: accepted-draft counts {bad} are not integers in [0, gamma={t.gamma}] "
        f"for the {t.harvest} harvest (source={t.source}). The scheduler's verify width does not match this "
        f"geometry: speculative_num_draft_tokens must be gamma+1={t.gamma + 1}. This round and any like it "
        "are left out of the accept-length statistics (reported once; count in summary 'invalid_rounds'). "
        f"Check --speculative-num-draft-tokens and the drafter's block_size.{t.dp_tag}"
    )


__all__ = ["summary_json", "summary_line", "describe_line", "invalid_round_line"]
