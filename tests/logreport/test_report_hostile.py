"""``report`` under hostile and broken input (issue 36): nothing overwritten, no traceback, bounded
memory, escapes kept off the terminal. Each test failed before its fix."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest
from server_logs import Log, rounds

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.telemetry.settings import TelemetrySettings


@pytest.fixture
def log(tmp_path):
    written = Log(tmp_path / "server.log")
    t = written.process()
    rounds(t, 60, seed=11)
    written.close()
    return written.path


def _error(capsys) -> dict:
    return json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("how", ["a link to the log", "a log named .png"])
def test_plot_never_replaces_an_input(log, tmp_path, capsys, how):
    if how == "a link to the log":
        target = tmp_path / "r.png"
        target.symlink_to(log)
        inputs = [str(log)]
    else:
        target = tmp_path / "x.png"
        target.write_bytes(log.read_bytes())
        inputs = [str(target)]
    before = log.read_bytes()
    assert main(["report", *inputs, "--json", "--plot", str(target), "--replace-plot"]) == 2
    error = _error(capsys)
    assert error["kind"] == "usage" and error["where"] == "--plot"
    assert ("symbolic link" if how == "a link to the log" else "is the input") in error["message"]
    assert log.read_bytes() == before and target.read_bytes() == before


def test_plot_replaces_a_png_but_not_another_file_unless_asked(log, tmp_path, capsys):
    other = tmp_path / "notes.png"
    other.write_text("my notes\n")
    assert main(["report", str(log), "--json", "--plot", str(other)]) == 2
    assert "--replace-plot" in _error(capsys)["message"] and other.read_text() == "my notes\n"
    assert main(["report", str(log), "--json", "--plot", str(other), "--replace-plot"]) == 0
    capsys.readouterr()
    assert other.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    os.chmod(other, 0o640)
    first = other.read_bytes()
    assert main(["report", str(log), "--plot", str(other)]) == 0  # a PNG is replaced, its mode kept
    assert other.read_bytes()[:8] == first[:8] and (os.stat(other).st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".plot-")] == []  # no temporary left


def test_check_plot_refuses_a_file_that_is_not_such_an_image(tmp_path, capsys, monkeypatch):
    def _must_not_run(*_a, **_k):
        raise AssertionError("measured before the plot path was checked")

    monkeypatch.setattr("sglang_dspark_plugin.check.cli.load_target_model", _must_not_run)
    config = tmp_path / "config.pdf"
    config.write_text("{}")
    assert main(["check", "--json", "--no-progress", "--plot", str(config)]) == 2
    assert "--replace-plot" in _error(capsys)["message"] and config.read_text() == "{}"
    link = tmp_path / "p.png"
    link.symlink_to(config)
    assert main(["check", "--json", "--no-progress", "--plot", str(link)]) == 2
    assert "symbolic link" in _error(capsys)["message"]


ROUND_OK = "dspark accept round={n} bs=2 accept_len=[2,3] mean=2.50 harvest=dspark(census)"


@pytest.mark.parametrize(
    "bad",
    [
        "dspark accept round=61 bs=2 accept_len=[1,,2] mean=1.50 harvest=dspark(census)",
        "dspark accept round=61 bs=1 accept_len=[,] mean=1.00 harvest=dspark(census)",
        "dspark accept summary rounds=100 request_rounds=300 mean_accept_len=2.50 last_100_rounds=2.50 "
        "window_mean=n/a per_position=[0.8.0,.] harvest=dspark(census) gamma=2 rounds_per_s=9.0 alarms=0 "
        "invalid_rounds=0",
        "dspark host cost rounds=100 plugin_us_per_round=1.2.3 round_us_median=40.0 plugin_fraction=0.0.1",
        "dspark accept telemetry: harvest=dspark(census) gamma=4 per_round_level=INFO summary_every=50 "
        "alarm=mean<1.60 over 999999 rounds after 9999999999 metrics=on",
    ],
)
def test_a_line_whose_values_do_not_parse_is_counted_never_fatal(tmp_path, capsys, bad):
    log = Log(tmp_path / "server.log")
    t = log.process()
    rounds(t, 60, seed=3)
    log.line(bad)
    rounds(t, 10, seed=4)
    log.close()
    assert main(["report", str(log.path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["malformed"] == 1 and report["groups"][0]["rounds"] == 70


def test_a_corrupt_gz_and_a_closed_stdin_are_handled(tmp_path, capsys, monkeypatch, log):
    corrupt = tmp_path / "server.log.1.gz"
    good = gzip.compress(log.read_bytes())
    corrupt.write_bytes(good[:40] + b"\x00" * 64 + good[104:])  # the deflate stream damaged
    code = main(["report", str(corrupt), str(log), "--json"])
    out = capsys.readouterr()
    assert code == 0 and "stopped reading" in out.err and json.loads(out.out)["groups"][0]["rounds"] >= 60
    monkeypatch.setattr("sys.stdin", None)
    assert main(["report", "-", "--json"]) == 2
    assert "standard input is closed" in _error(capsys)["message"]
    closed = io.TextIOWrapper(io.BytesIO(b""))
    closed.close()
    monkeypatch.setattr("sys.stdin", closed)
    assert main(["report", "-", "--json"]) == 2
    assert "standard input is closed" in _error(capsys)["message"]


LEVELS = [None, 5, 10, 15, 20, 25, 30, 40, 50]


@pytest.mark.parametrize("level", LEVELS)
def test_every_startup_line_the_server_can_write_is_read_back(tmp_path, level):
    """The telemetry's own startup line under each documented log level and alarm setting."""
    from sglang_dspark_plugin.logreport import read_logs

    for alarm in ({"alarm_threshold": 0.0}, {"alarm_threshold": 1025.0, "alarm_window": 100_000}, {}):
        buckets = {"context_buckets": tuple(range(1, 33))} if level == 50 else {}  # the most there can be
        settings = TelemetrySettings(
            accept_log_level=level, summary_every=10**9, alarm_warmup=10**9, **alarm, **buckets
        )
        log = Log(tmp_path / f"s-{level}-{len(alarm)}-{alarm.get('alarm_threshold')}.log")
        t = log.process(settings=settings)
        log.close()
        group = read_logs([str(log.path)]).to_json()["groups"][0]
        assert (group["gamma"], group["gamma_from"]) == (t.gamma, "startup line"), t.describe()
        assert group["context_buckets"] == t.by_context.names  # the server's buckets, read back
        if settings.alarm_threshold:  # the server's own alarm, as the server ran it
            assert group["alarm_threshold"] == pytest.approx(t.alarm.threshold)


def test_a_numeric_log_level_keeps_the_servers_alarm_and_a_collapse_is_found(tmp_path):
    from sglang_dspark_plugin.logreport import read_logs

    settings = TelemetrySettings(accept_log_level=15, summary_every=50, alarm_window=40, alarm_warmup=10)
    log = Log(tmp_path / "server.log")
    log.logger.setLevel(1)
    t = log.process(settings=settings)
    assert "per_round_level=Level 15" in t.describe()
    rounds(t, 120, collapsed=True)
    log.close()
    report = read_logs([str(log.path)]).to_json()
    assert report["malformed"] == 0 and report["verdict"] == "collapse"
    assert report["groups"][0]["gamma_from"] == "startup line"


def _peak_bytes(run) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["one line, no newline", "one line in a .gz", "many long lines"])
def test_memory_is_bounded_by_bytes_whatever_the_lines(tmp_path, shape, log):
    from sglang_dspark_plugin.logreport import read_logs
    from sglang_dspark_plugin.logreport.lines import MAX_LINE_BYTES

    size = 24 * MAX_LINE_BYTES
    path = tmp_path / "hostile.log"
    if shape == "one line, no newline":
        path.write_bytes(b"dspark accept round=" + b"9" * size)
    elif shape == "one line in a .gz":
        path = tmp_path / "hostile.log.gz"
        path.write_bytes(gzip.compress(b"x" * size + b" dspark accept \n"))
    else:
        line = (
            b"[t] dspark accept round=1 bs=1 accept_len=[" + b"2," * (MAX_LINE_BYTES // 2) + b"2] mean=2.00\n"
        )
        path.write_bytes(line * 24)
    found: dict = {}
    peak = _peak_bytes(lambda: found.update(read_logs([str(path), str(log)]).to_json()))
    assert peak < 8 * MAX_LINE_BYTES, peak  # a few chunks, never the input
    assert found["overlong"] >= 1 and found["groups"][0]["rounds"] == 60


def test_lines_held_before_gamma_is_known_are_bounded_by_their_size(tmp_path):
    from sglang_dspark_plugin.logreport import read_logs
    from sglang_dspark_plugin.logreport.groups import MAX_HELD_LENGTHS

    wide = ",".join(["2"] * 50_000)
    line = f"[t] dspark accept round={{n}} bs=50000 accept_len=[{wide}] mean=2.00 harvest=dspark(census)\n"
    path = tmp_path / "no-startup.log"
    path.write_text("".join(line.format(n=n) for n in range(1, 41)))
    report = read_logs([str(path)])
    group = next(iter(report.groups.values()))
    assert group.gamma_from == "inferred from the longest accept length" or group.gamma is not None
    assert len(group.pending) == 0 and group.pending_lengths <= MAX_HELD_LENGTHS + 50_000


@pytest.mark.parametrize(
    "text",
    [
        "dspark accept ALARM: mean accept length 1.00 over the last 40 rounds (40 request-rounds) is below "
        "1.60 (gamma=4, max 5). harvest=dspark source=census",
        "dspark accept ALARM (context): ",
    ],
)
def test_every_pattern_runs_in_time_linear_in_the_line(text):
    """A long run of blanks after a marker: each pattern must not rescan it per character. The
    quadratic patterns took seconds on 50k blanks; here 200k are read well inside a second."""
    import time

    from sglang_dspark_plugin.logreport.lines import classify

    line = "[t] " + text + " " * 200_000 + "x"
    start = time.perf_counter()
    classify(line, "f", 1)
    classify(line[:-1], "f", 1)
    assert time.perf_counter() - start < 1.0  # quadratic: ~40 s


def test_escapes_from_the_log_never_reach_the_terminal(tmp_path, capsys):
    log = Log(tmp_path / "server.log")
    t = log.process()
    rounds(t, 60, collapsed=True)
    log.line(
        "dspark accept ALARM: mean accept length 1.00 over the last 40 rounds (40 request-rounds) is below "
        "1.60 (gamma=4, max 5). harvest=dspark source=census Likely cause: \x1b[2J\x1b[31mforged\x07"
    )
    log.line("dspark accept ALARM (context): at \x1b]0;title\x07 32k")
    log.close()
    main(["report", str(log.path)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "\\x1b]0;title" in out


def test_the_hostile_benchmark_runs_every_case(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_report.py"
    done = subprocess.run(
        [sys.executable, str(script), "--hostile", "--mb", "1", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [
        "blank-lines",
        "one-line",
        "gz-one-line",
        "marker-blanks",
        "plot-4096-groups",
    ]
    assert all("peak" in line and "MB" in line for line in lines)


@pytest.mark.parametrize("command", ["report", "check"])
def test_plot_without_matplotlib_is_refused_cleanly_by_one_helper(
    log, tmp_path, capsys, monkeypatch, command
):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    args = [str(log)] if command == "report" else ["--no-progress"]
    assert main([command, *args, "--json", "--plot", str(tmp_path / "p.png")]) == 2
    error = _error(capsys)
    assert error["kind"] == "usage" and "pip install sglang-dspark-plugin[plot]" in error["message"]
    assert not (tmp_path / "p.png").exists()
