"""The accept telemetry with the live offset probe attached: the ALARM and the summary state what the
probe measured (a real ``LiveProbe`` fed with drafts one position late, aligned, or matching nothing),
and fall back to the guess only while it has not decided."""

from __future__ import annotations

from probe_streams import EVERY_ROUND, fed, sequence

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import LiveProbe, VerifyRow
from sglang_dspark_plugin.telemetry import AcceptTelemetry, TelemetrySettings

DFLASH = DsparkHarvest.DFLASH


def telemetry_with(probe: LiveProbe | None) -> AcceptTelemetry:
    settings = TelemetrySettings(
        accept_log_level=None, summary_every=0, alarm_threshold=1.6, alarm_warmup=0, alarm_window=4
    )
    t = AcceptTelemetry(4, DFLASH, "census", (), settings=settings, probe=probe)
    assert t.alarm.probe is probe  # wired at construction: the alarm and the summary state its verdict
    return t


def fed_nothing(rounds: int = 800) -> LiveProbe:
    """A probe whose drafts are tokens the target never commits near them (a drafter that fits nothing)."""
    probe = LiveProbe(DFLASH, EVERY_ROUND)
    seq = sequence(rounds + 20)
    for pos in range(10, rounds):
        probe.begin_round()
        drafts = tuple((seq[pos + j] + 500) % 1000 for j in range(1, 5))
        probe.observe("r", pos, seq[pos], VerifyRow(drafts[:0] + (None,) + drafts[1:], (seq[pos + 1],)))
    return probe


def alarm_text(probe: LiveProbe | None) -> str:
    t = telemetry_with(probe)
    for _ in range(4):
        t.on_verify_complete([0, 0])
    assert t.alarm.fired == 1 and t.alarm.low()
    return t.alarm.alarms[0].message


def test_a_decided_probe_replaces_the_guess_with_the_measured_cause_and_fix() -> None:
    text = alarm_text(fed(+1))
    assert "Measured cause (live probe): drafts one position late" in text
    assert "set MEMRA_DSPARK_HARVEST=dspark" in text and "Likely cause" not in text


def test_a_drafter_that_matches_nothing_is_not_told_to_flip_the_harvest() -> None:
    text = alarm_text(fed_nothing())
    assert "no offset matches" in text and "the harvest is not the cause" in text
    assert "MEMRA_DSPARK_HARVEST=" not in text.split("evidence:")[1]


def test_aligned_drafts_say_the_harvest_is_not_the_cause() -> None:
    text = alarm_text(fed(0))
    assert "Measured (live probe): matched" in text and "the harvest is not the cause" in text


def test_before_the_probe_decides_the_alarm_advises_no_override() -> None:
    """A drafter that fits nothing must not be told to flip the harvest while the probe is measuring."""
    undecided = LiveProbe(DFLASH, EVERY_ROUND)
    assert not undecided.assessment().decisive
    text = alarm_text(undecided)
    assert "Cause not measured yet: the live probe is still scoring drafts (inconclusive" in text
    assert "Likely cause" not in text and "Try MEMRA_DSPARK_HARVEST" not in text
    assert "MEMRA_DSPARK_HARVEST=" not in text.split("evidence:")[1]


def test_without_a_probe_the_alarm_keeps_its_guess() -> None:
    text = alarm_text(None)
    assert "Likely cause: drafts harvested under the wrong convention" in text
    assert "Try MEMRA_DSPARK_HARVEST=dspark" in text


def test_the_summary_states_the_probe_verdict() -> None:
    t = telemetry_with(fed(+1))
    t.on_verify_complete([1, 2])
    line = t.summary_line()
    assert " probe=late held_requests=" in line
    # the live state an operator watches for a leak ends the line, and the summary holds it
    held_requests, held_rounds, _ = t.alarm.probe.held()
    assert line.endswith(
        f" held_requests={held_requests} held_rounds={held_rounds} swept_requests=0 queued_steps=0"
    )
    assert t.summary()["probe"]["kind"] == "late"
    assert t.summary()["state"] == {
        "held_requests": held_requests,
        "held_rounds": held_rounds,
        "swept_requests": 0,
        "queued_steps": 0,
    }
    plain = telemetry_with(None)
    plain.on_verify_complete([1, 2])
    assert "probe" not in plain.summary() and "probe=" not in plain.summary_line()
