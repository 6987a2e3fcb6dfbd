"""``dspark-harvest report``: a server log read back into the telemetry's own numbers, and a verdict
reached from the rounds, never from what a line claims.

The logs are written by the real telemetry (``AcceptTelemetry``) through a handler in sglang's format,
so the report is held to what the plugin actually writes: its totals, per-position rates and alarms
must equal the telemetry's own ``summary()``.
"""

from __future__ import annotations

import gzip
import io
import json

import pytest
from server_logs import LATE, Log, probe_line, rounds

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.logreport import read_logs
from sglang_dspark_plugin.logreport.lines import classify
from sglang_dspark_plugin.telemetry.settings import TelemetrySettings


@pytest.fixture
def log(tmp_path):
    written = Log(tmp_path / "server.log")
    yield written
    written.close()


def _group(report, dp=None):
    return next(g for g in report["groups"] if g["dp"] == dp)


def test_the_report_equals_the_telemetrys_own_summary_per_dp_group(log):
    healthy, collapsing = log.process(dp=0), log.process(dp=1)
    rounds(healthy, 300, seed=1)
    rounds(collapsing, 150, seed=2)
    rounds(collapsing, 150, collapsed=True, seed=3)
    report = read_logs([str(log.path)]).to_json()
    for t in (healthy, collapsing):
        want, got = t.summary(), _group(report, t.dp_rank)
        assert got["from"] == "per-round lines" and got["gamma"] == 4
        assert (got["rounds"], got["request_rounds"]) == (want["rounds"], want["request_rounds"])
        assert got["mean_accept_length"] == pytest.approx(want["mean_accept_length"])
        assert got["per_position"] == pytest.approx(want["per_position"])
        assert got["alarms_replayed"] == len(got["alarms_logged"]) == want["alarms_fired"]
    assert _group(report, 0)["verdict"] == "healthy" and want["alarms_fired"] > 0
    assert _group(report, 1)["verdict"] == "collapse"
    assert report["verdict"] == "collapse" and report["exit_code"] == 5
    over_time = _group(report, 1)["over_time"]
    assert over_time[0]["mean_accept_length"] > 2 and over_time[-1]["mean_accept_length"] < 1.3
    assert report["malformed"] == report["ignored_quoted"] == 0


def test_a_measured_misalignment_exits_3_and_a_probe_line_its_numbers_do_not_support_counts_for_nothing(log):
    t = log.process(harvest=DsparkHarvest.DFLASH)
    rounds(t, 100, collapsed=True)
    late = LATE
    log.line(probe_line(late, DsparkHarvest.DFLASH))
    report = read_logs([str(log.path)]).to_json()
    probe = _group(report)["probe"][-1]
    assert probe["kind"] == "late" and probe["confirmed"]
    assert report["verdict"] == "misaligned" and report["exit_code"] == 3

    # the same sentence over rates that say the drafts match their own positions: not confirmed
    forged = probe_line(late, DsparkHarvest.DFLASH).replace("own 0.06", "own 0.70")
    log.close()
    forged_log = Log(log.path.with_name("forged.log"))
    t = forged_log.process(harvest=DsparkHarvest.DFLASH)
    rounds(t, 100, collapsed=True)
    forged_log.line(forged)
    forged_log.close()
    report = read_logs([str(forged_log.path)]).to_json()
    assert _group(report)["probe"][-1]["confirmed"] is False
    assert report["verdict"] == "collapse"  # from the rounds: no misalignment was measured


def test_request_text_imitating_the_plugin_cannot_change_the_verdict(log):
    t = log.process()
    rounds(t, 200, seed=4)
    fake_round = "dspark accept round=201 bs=4 accept_len=[1,1,1,1] mean=1.00 harvest=dspark(census)"
    fake_alarm = "dspark accept ALARM: mean accept length 1.00 over the last 40 rounds"
    late = LATE
    for text in (fake_round, fake_alarm, probe_line(late, DsparkHarvest.DSPARK)):
        for _ in range(500):  # sglang logs a request as a repr: quoted, newlines escaped
            log.line(f"Receive: obj=GenerateReqInput(text={text!r}, rid='x')")
        log.line(f"Receive: obj=GenerateReqInput(text={('a' * 300 + chr(10) + text)!r})")
    report = read_logs([str(log.path)]).to_json()
    assert report["verdict"] == "healthy" and report["exit_code"] == 0
    assert report["ignored_quoted"] == 1503
    assert _group(report)["rounds"] == 200 and _group(report)["probe"] == []


def test_inconsistent_or_hostile_lines_are_rejected_and_never_crash_it(log):
    t = log.process()
    rounds(t, 60, seed=5)
    hostile = [
        "dspark accept round=61 bs=3 accept_len=[1,1] mean=1.00 harvest=dspark(census)",  # bs disagrees
        "dspark accept round=62 bs=2 accept_len=[1,1] mean=3.00 harvest=dspark(census)",  # mean disagrees
        "dspark accept round=63 bs=2 accept_len=[9,9] mean=9.00 harvest=dspark(census)",  # above gamma+1
        "dspark accept round=64 bs=1 accept_len=[0] mean=0.00 harvest=dspark(census)",  # below 1
        "dspark accept round=65 bs=2 accept_len=[2,2] mean=2.00 harvest=dspark(census) and more",
        "dspark accept summary rounds=x",
        "dspark probe: " + "(" * 5000,
        "dspark accept round=" + "9" * 10000,
        "dspark accept round=66 bs=9999999 accept_len=["
        + ",".join(["1"] * 100000)
        + "] mean=1.00 harvest=dspark(census)",
    ]
    for text in hostile:
        log.line(text)
    with open(log.path, "ab") as raw:
        raw.write(
            b"\xff\xfe dspark accept \x00\x01 round=\n[truncated] dspark accept round=67 bs=2 accept_len=[1,"
        )
    report = read_logs([str(log.path)]).to_json()
    group = _group(report)
    assert group["rounds"] == 60 and group["rejected_lines"] == 5
    assert report["malformed"] == 6
    assert group["request_rounds"] == t.summary()["request_rounds"]


def test_rotated_gzipped_and_restarted_logs_add_up_and_the_last_run_decides(tmp_path):
    first, second = Log(tmp_path / "server.log.1"), Log(tmp_path / "server.log")
    bad = first.process()
    rounds(bad, 120, collapsed=True)  # a collapse, then the operator restarts with a fix
    first.close()
    good = second.process()
    rounds(good, 120, seed=6)
    second.close()
    gz = tmp_path / "server.log.1.gz"
    gz.write_bytes(gzip.compress((tmp_path / "server.log.1").read_bytes()))
    report = read_logs([str(gz), str(tmp_path / "server.log")]).to_json()
    group = _group(report)
    assert group["restarts"] == 1 and group["rounds"] == 240
    assert group["request_rounds"] == bad.summary()["request_rounds"] + good.summary()["request_rounds"]
    assert group["alarms_replayed"] == bad.summary()["alarms_fired"] > 0
    assert report["verdict"] == "healthy"  # the run after the restart is healthy
    # the collapsed run alone, from its truncated tail (no startup line: gamma from the accept lengths)
    tail = (tmp_path / "server.log.1").read_text().splitlines()[60:]
    (tmp_path / "tail.log").write_text("\n".join(tail) + "\n")
    report = read_logs([str(tmp_path / "tail.log")]).to_json()
    assert report["verdict"] == "collapse" and _group(report)["rounds"] > 0
    assert _group(report)["gamma"] == 4 and _group(report)["gamma_from"] == "summary line"


def test_a_summary_only_log_is_read_from_its_summaries(log):
    quiet = TelemetrySettings(accept_log_level=None, summary_every=20, alarm_window=40, alarm_warmup=10)
    t = log.process(settings=quiet)
    rounds(t, 100, collapsed=True)
    report = read_logs([str(log.path)]).to_json()
    group, want = _group(report), t.summary()
    assert group["from"] == "summary lines" and group["rounds"] == want["rounds"]
    assert group["mean_accept_length"] == pytest.approx(want["mean_accept_length"], abs=0.005)
    assert report["verdict"] == "collapse"


def test_the_command_exit_codes_stdin_json_and_plot(log, tmp_path, capsys, monkeypatch):
    t = log.process()
    rounds(t, 80, seed=7)
    assert main(["report", str(log.path)]) == 0
    text = capsys.readouterr().out
    assert "verdict: healthy (exit 0)" in text and "per position:" in text
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(log.path.read_bytes())))
    assert main(["report", "-", "--json", "--plot", str(tmp_path / "r.png")]) == 0
    assert json.loads(capsys.readouterr().out)["groups"][0]["rounds"] == 80
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["report", str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "other.log").write_text("[2026-12-03] Decode batch, #running-req: 1\n")
    assert main(["report", str(tmp_path / "other.log"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "usage"
    assert main(["report", str(log.path), "--plot", str(tmp_path / "r.svg")]) == 2


def test_the_grammar_trusts_a_prefix_only_without_quotes_and_within_its_length():
    text = "dspark accept round=1 bs=1 accept_len=[2] mean=2.00 harvest=dspark(census)"
    assert classify(f"[2026-12-03 10:00:00 DP1 TP0] {text}", "f", 1)[0] == "line"
    assert classify(f"INFO:sglang:{text}", "f", 1)[0] == "line"
    assert classify(f"x='{text}'", "f", 1)[0] == "quoted"
    assert classify("a" * 201 + text, "f", 1)[0] == "quoted"
    assert classify(f"[t] {text} trailing", "f", 1)[0] == "malformed"


def test_a_summary_with_the_live_state_is_read_and_reported():
    summary = (
        "[t] dspark accept summary rounds=100 request_rounds=300 mean_accept_len=2.50 last_100_rounds=2.50 "
        "window_mean=n/a per_position=[0.80,0.40] harvest=dspark(census) gamma=2 rounds_per_s=9.0 alarms=0 "
        "invalid_rounds=0 probe=matched held_requests=3 held_rounds=5 swept_requests=2 queued_steps=17 dp=1"
    )
    kind, line = classify(summary, "f", 1)
    assert kind == "line" and line is not None and line.kind == "summary"
    assert (line.fields["held"], line.fields["swept"], line.fields["queued"], line.dp) == ("3", "2", "17", 1)


def test_the_host_cost_and_its_queue_threads_time_are_read_from_the_plugins_own_lines(log, capsys):
    """``dspark host cost`` lines as ``HostCost`` writes them, with and without the queue's thread
    (``MEMRA_DSPARK_QUEUE_THREAD``): the largest fraction of a round each, in the JSON and the text."""
    from sglang_dspark_plugin.telemetry import HostCost

    t = log.process()
    rounds(t, 100, seed=4)
    now, thread_ns = [0], [0]
    for off_thread, plugin_ns, thread_step in ((None, 3_000, 0), (lambda: thread_ns[0], 1_000, 50_000)):
        cost = HostCost(every=2, logger=log.logger, clock=lambda: now[0], off_thread=off_thread)
        for _ in range(3):
            cost.add(plugin_ns)
            thread_ns[0] += thread_step
            now[0] += 1_000_000  # a 1 ms round
            cost.end_round()
    group = _group(read_logs([str(log.path)]).to_json())
    assert group["host_cost_fraction"] == pytest.approx(0.003)  # 3 us of a 1 ms round, the larger
    assert group["host_cost_thread_fraction"] == pytest.approx(0.05)  # 50 us a round on the thread
    assert main(["report", str(log.path)]) == 0
    assert (
        "host cost: at most 0.300% of a round (and its queue's thread: at most 5.000%)"
        in capsys.readouterr().out
    )
