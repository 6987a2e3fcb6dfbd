"""The live offset probe's core: sglang's row layout, scoring, the decision rule, the sampling schedule,
bounded memory, its settings and its log line (no model, no sglang)."""

from __future__ import annotations

import logging

import pytest
from probe_streams import EVERY_ROUND, drive, sequence

from sglang_dspark_plugin.errors import GeometryError, ProbeMismatchError, SettingsError
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import (
    LiveProbe,
    ProbeSettings,
    VerifyRow,
    observe_round,
    row_of_round,
    verify_row,
)
from sglang_dspark_plugin.probe.offsets import ProbeCounts, ProbeRound, probe_counts
from sglang_dspark_plugin.probe.verdict import DecisionRule, decide
from sglang_dspark_plugin.util.logsafe import EscapeAndBound

DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK
# -- sglang's row ------------------------------------------------------------------------------------


def test_verify_row_hides_the_slot_the_bonus_overwrote() -> None:
    row = verify_row([11, 12, 99, 14, 0], 3)  # drafts 11 12 13 14, two accepted, bonus 99
    assert row == VerifyRow((11, 12, None, 14), (11, 12, 99), unseen_rejected=True)
    assert verify_row([11, 12, 13, 14, 99], 5).drafts == (11, 12, 13, 14)  # all accepted: none hidden
    assert verify_row([11, 12, 13, 14, 0], 1, capped=True).unseen_rejected is False
    assert row_of_round((11, 12, 13, 14), (11, 12, 99)) == [11, 12, 99, 14, 0]


@pytest.mark.parametrize("commit", [0, 6, True, 2.0])
def test_verify_row_refuses_a_commit_length_outside_the_row(commit: object) -> None:
    with pytest.raises(GeometryError) as info:
        verify_row([1, 2, 3, 4, 5], commit)  # type: ignore[arg-type]
    assert "1..5" in info.value.message


# -- scoring -------------------------------------------------------------------------------------------


def test_scoring_by_hand() -> None:
    probe = LiveProbe(DFLASH, EVERY_ROUND)  # the sequence: token 100 + i at position i
    probe.begin_round()
    # anchor 103 at position 3; drafts for 4..7: 104 right, 999 wrong, 107 one late, 105 two early
    probe.observe("a", 3, 103, VerifyRow((104, 999, 107, 105), (104, 105)))
    assert probe.counts == ProbeCounts()  # the round reads up to position 8: not committed yet
    probe.begin_round()
    probe.observe("a", 5, 105, VerifyRow((106, 107, 108, 109), (106, 107, 108)))  # commits 6..8
    # own: 104 of 4 drafts; late (positions 5..8): 107; early (4..6, the anchor 3 is not compared): none
    assert probe.counts == ProbeCounts(1, 1, 0, 4, 4, 3)
    probe.finish("a")  # the second round where 6..8 reach: own 106 107 108; late 7..8; early 6..8
    assert probe.counts == ProbeCounts(1 + 3, 1, 0, 4 + 3, 4 + 2, 3 + 3)
    assert probe.held() == (0, 0, 0)


def test_a_late_drafter_is_named_with_the_override_and_a_two_rows_off_one_is_not() -> None:
    seq = sequence(800)
    late = LiveProbe(DFLASH, EVERY_ROUND)
    drive(late, seq, gamma=7, shift=1)
    verdict = late.assessment()
    assert (verdict.kind, verdict.override) == ("late", "MEMRA_DSPARK_HARVEST=dspark")
    assert "one position late" in verdict.message and "one later 1.00" in verdict.message
    off = LiveProbe(DSPARK, EVERY_ROUND)
    drive(off, seq, gamma=7, shift=1)
    assert (off.assessment().kind, off.assessment().override) == ("neither", None)
    early = LiveProbe(DSPARK, EVERY_ROUND)
    drive(early, seq, gamma=7, shift=-1)
    assert (early.assessment().kind, early.assessment().override) == ("early", "MEMRA_DSPARK_HARVEST=dflash")


def test_full_drafts_score_as_the_offline_probe_does_but_for_the_anchor() -> None:
    seq = sequence(300)
    rounds, probe, pos, gamma = [], LiveProbe(DFLASH, EVERY_ROUND), 10, 5
    while pos + gamma + 3 < len(seq):
        drafts = tuple(seq[pos + j + (j % 3) - 1] for j in range(1, gamma + 1))  # a mix of offsets
        committed = tuple(seq[pos + 1 : pos + 2 + pos % 3])
        rounds.append(ProbeRound(pos, drafts))
        probe.begin_round()
        probe.observe("r", pos, seq[pos], VerifyRow(drafts, committed))
        pos += len(committed)
    probe.finish("r")
    offline = probe_counts(rounds, seq[: pos + 1])
    anchor_hits = sum(r.drafts[0] == seq[r.anchor_pos] for r in rounds)
    assert probe.counts == ProbeCounts(
        offline.own, offline.late, offline.early - anchor_hits,
        offline.compared_own, offline.compared_late, offline.compared_early - len(rounds),
    )  # fmt: skip


def test_a_request_that_restarts_is_started_over() -> None:
    probe = LiveProbe(DFLASH, EVERY_ROUND)
    probe.begin_round()
    probe.observe("r", 10, 5, VerifyRow((1, 2, 3), (1,)))
    probe.begin_round()
    probe.observe("r", 4, 5, VerifyRow((1, 2, 3), (1,)))  # position went back: a re-prefill
    assert probe.held()[:2] == (1, 1)  # only the new round is pending
    assert probe.counts.compared_own == 1  # the old one scored where it could (its draft 1 at 11)


# -- the decision rule ---------------------------------------------------------------------------------


def test_decide_waits_for_enough_drafts_and_names_no_match_only_with_many() -> None:
    few = ProbeCounts(own=300, late=10, early=10, compared_own=399, compared_late=399, compared_early=399)
    assert decide(few, DFLASH).kind == "inconclusive"
    matched = ProbeCounts(own=200, late=20, early=25, compared_own=400, compared_late=400, compared_early=400)
    assert (decide(matched, DFLASH).kind, decide(matched, DFLASH).override) == ("matched", None)
    flat = ProbeCounts(own=70, late=68, early=69, compared_own=400, compared_late=400, compared_early=400)
    assert decide(flat, DFLASH).kind == "inconclusive"  # flat, but not yet no_match_compared drafts
    flat_many = ProbeCounts(700, 680, 690, 4000, 4000, 4000)
    verdict = decide(flat_many, DFLASH)
    assert (verdict.kind, verdict.override, verdict.mismatch) == ("no-match", None, True)
    assert "the harvest is not the cause" in verdict.message
    silent = ProbeCounts(0, 3, 0, 4000, 4000, 4000)  # 3 chance hits: under min_rate
    assert decide(silent, DFLASH).kind == "no-match"


def test_decide_needs_the_margin_and_the_z() -> None:
    rule = DecisionRule(min_compared=100, margin=1.5, min_z=5.0, min_rate=0.05, no_match_compared=10**6)
    close = ProbeCounts(130, 100, 10, 1000, 1000, 1000)  # 1.3x: no margin
    assert decide(close, DFLASH, rule).kind == "inconclusive"
    noisy = ProbeCounts(16, 8, 8, 100, 100, 100)  # 2x, but z ~ 1.75
    assert decide(noisy, DFLASH, rule).kind == "inconclusive"
    clear = ProbeCounts(400, 100, 100, 1000, 1000, 1000)
    assert decide(clear, DFLASH, rule).kind == "matched"


# -- sampling and memory -------------------------------------------------------------------------------


def test_sampling_schedule() -> None:
    probe = LiveProbe(DFLASH, ProbeSettings(rounds=3, every=4))
    assert [probe.begin_round() for _ in range(12)] == [1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert probe.begin_round(alarm_low=True) and probe.sampled_rounds == 7  # round 12: off-schedule
    quiet = LiveProbe(DFLASH, ProbeSettings(rounds=2, every=0))
    assert [quiet.begin_round() for _ in range(5)] == [1, 1, 0, 0, 0]


def test_unsampled_rounds_only_feed_requests_with_rounds_to_score() -> None:
    probe = LiveProbe(DFLASH, ProbeSettings(rounds=1, every=0))
    probe.begin_round()
    probe.observe("a", 10, 1, VerifyRow((2, 3, 4), (2,)))
    probe.begin_round()
    assert probe.busy and probe.wants("a") and not probe.wants("b")
    probe.observe("b", 10, 1, VerifyRow((2, 3, 4), (2,)))  # not sampled, not tracked: ignored
    assert probe.held()[0] == 1


def test_memory_is_bounded_over_many_requests() -> None:
    probe = LiveProbe(DFLASH, ProbeSettings(rounds=50, every=0), max_requests=64, stale_rounds=8)
    for k in range(50):  # 100 new requests a round that never finish (aborted, never reported)
        probe.begin_round()
        for i in range(100):
            probe.observe(f"req-{k}-{i}\n", 100, 1, VerifyRow((2, 3, 4, 5), (2,)))
        assert probe.held()[0] <= 64
    assert probe.skipped > 0
    for _ in range(20):
        probe.begin_round()
    assert probe.held() == (0, 0, 0) and not probe.busy  # swept once stale; unsampled rounds are idle


def test_memory_is_bounded_over_a_long_request() -> None:
    gamma, seq = 7, sequence(30_000)
    probe = LiveProbe(DFLASH, EVERY_ROUND)
    pos, peak = 10, (0, 0, 0)
    while pos + gamma + 2 < len(seq):
        probe.begin_round()
        committed = seq[pos + 1 : pos + 2 + pos % 2]
        drafts = [seq[pos + j] for j in range(1, gamma + 1)]
        probe.observe("long", pos, seq[pos], verify_row(row_of_round(drafts, committed), len(committed)))
        peak = tuple(map(max, peak, probe.held()))  # type: ignore[assignment]
        pos += len(committed)
    assert peak[1] <= gamma + 2 and peak[2] <= 2 * gamma + 4, peak
    assert probe.counts.compared_own > 20_000 and probe.assessment().kind == "matched"


# -- settings, the log line, fail ----------------------------------------------------------------------


def test_settings_from_the_table() -> None:
    s = ProbeSettings.from_env(
        {
            "MEMRA_DSPARK_PROBE_ROUNDS": "50",
            "MEMRA_DSPARK_PROBE_EVERY": "off",
            "MEMRA_DSPARK_ON_MISMATCH": "FAIL",
        }
    )
    assert (s.rounds, s.every, s.on_mismatch) == (50, 0, "fail")
    assert ProbeSettings.from_env({}) == ProbeSettings()
    for name, raw in (
        ("MEMRA_DSPARK_PROBE_EVERY", "-1"),
        ("MEMRA_DSPARK_PROBE_ROUNDS", "1e3"),
        ("MEMRA_DSPARK_ON_MISMATCH", "stop"),
        ("MEMRA_DSPARK_ON_MISMATCH", "\u212aill"),  # the Kelvin sign is not ASCII
    ):
        with pytest.raises(SettingsError) as info:
            ProbeSettings.from_env({name: raw})
        assert info.value.where == name


@pytest.mark.parametrize("field", [{"rounds": -1}, {"every": True}, {"on_mismatch": "Fail"}])
def test_settings_refuse_wrong_values(field: dict) -> None:
    with pytest.raises(SettingsError) as info:
        ProbeSettings(**field)
    assert next(iter(field)) in info.value.where


def test_the_verdict_is_logged_once_through_the_safe_logger(caplog: pytest.LogCaptureFixture) -> None:
    probe = LiveProbe(DFLASH, EVERY_ROUND, dp_tag=" dp=1")
    assert any(isinstance(f, EscapeAndBound) for f in logging.getLogger("sglang_dspark_plugin.probe").filters)
    with caplog.at_level(logging.INFO, logger="sglang_dspark_plugin.probe"):
        drive(probe, sequence(400), gamma=7, shift=1, rid="evil\n dspark accept round=1")
        polled = [probe.poll(), probe.poll()]
    assert polled[0] is not None and polled[0].kind == "late" and polled[1] is None
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.getMessage().endswith(" dp=1")
    assert "\n" not in record.getMessage() and "evil" not in record.getMessage()


def test_fail_stops_on_a_mismatch_and_not_on_a_match() -> None:
    fail = ProbeSettings(rounds=10**9, on_mismatch="fail")
    probe = LiveProbe(DFLASH, fail)
    drive(probe, sequence(400), gamma=7, shift=1)
    with pytest.raises(ProbeMismatchError) as info:
        probe.poll()
    assert (
        "MEMRA_DSPARK_HARVEST=dspark" in info.value.message and info.value.where == "MEMRA_DSPARK_ON_MISMATCH"
    )
    fine = LiveProbe(DFLASH, fail)
    drive(fine, sequence(400), gamma=7, shift=0)
    assert fine.poll().kind == "matched"  # type: ignore[union-attr]


def test_the_cost_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "bench_live_probe.py"
    spec = importlib.util.spec_from_file_location("bench_live_probe", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--rounds", "16", "--repeats", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 9 and all(float(r.split()[-3]) > 0 for r in rows)


# -- a whole served round at once (what the worker hands over) ----------------------------------------


def _served_round(requests: int, k: int, gamma: int, shift: int) -> tuple[list, list, list[int], list[int]]:
    """Round ``k`` of ``requests`` requests decoding their own sequences, one accepted draft each:
    (requests, committed, flat rows, accept lengths) as sglang's host copy holds them."""
    reqs, committed, rows, accept = [], [], [], []
    for r in range(requests):
        seq = sequence(400, seed=r + 3)
        pos = 10 + 2 * k
        drafts = [seq[pos + j + shift] for j in range(1, gamma + 1)]
        done = seq[pos + 1 : pos + 3]
        reqs.append((r, pos, seq[pos], True))
        committed.append(done)
        rows += row_of_round(drafts, done)
        accept.append(len(done))
    return reqs, committed, rows, accept


def test_a_whole_round_scores_as_its_requests_one_by_one() -> None:
    whole, single = LiveProbe(DSPARK, EVERY_ROUND), LiveProbe(DSPARK, EVERY_ROUND)
    for k in range(60):
        reqs, committed, rows, accept = _served_round(4, k, 5, 1)
        whole.begin_round()
        observe_round(whole, reqs, committed, rows, accept)
        single.begin_round()
        for i, (rid, pos, anchor, _) in enumerate(reqs):
            single.observe(rid, pos, anchor, verify_row(rows[i * 6 : (i + 1) * 6], accept[i]))
    assert whole.counts == single.counts and whole.counts.compared_own > 0


def test_a_round_keeps_the_drafts_of_at_most_max_per_round_requests() -> None:
    probe = LiveProbe(DSPARK, EVERY_ROUND, max_per_round=8)
    reqs, committed, rows, accept = _served_round(64, 0, 5, 0)
    probe.begin_round()
    observe_round(probe, reqs, committed, rows, accept)
    requests, pending, _ = probe.held()
    assert requests == 8 and pending == 8  # the other 56 are not tracked: their rows cost nothing more
    reqs[0] = (*reqs[0][:3], False)  # a request sglang does not count this round is left out
    probe.begin_round()
    observe_round(probe, reqs, committed, None, None)  # an unsampled round: committed tokens only
    assert probe.held()[0] <= 8
