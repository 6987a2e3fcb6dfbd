"""``dspark-harvest report LOG [LOG ...]``: what a server's log says about the plugin's rounds
(``logreport``), with exit codes a pipeline can gate on."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..commands import add_command, emit, refuse
from ..errors import DsparkHarvestError, UsageError
from ..logreport.engines import DEFAULT_DECODE_LOG_INTERVAL
from ..util.figure import REPLACE_FLAG


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of decode batches, 1 to 1000000")
    return value


EPILOG = """examples:
  dspark-harvest report server.log                    the rounds, the alarms, the probe, a verdict
  dspark-harvest report server.log.1.gz server.log    rotated files, oldest first
  journalctl -u sglang | dspark-harvest report - --json
  dspark-harvest report server.log --plot report.png  accept length over time, per position
  dspark-harvest report builtin-dflash.log            sglang's own DFLASH/DSPARK decode lines (accept len)
  dspark-harvest report vllm.log                      vLLM's SpecDecoding metrics lines

exit codes: 0 healthy; 3 the live probe measured drafts off their positions (a harvest mismatch);
5 acceptance collapsed with no misalignment measured (the drafter, the workload; for an engine's lines,
the per-position shape says whether it looks like a harvest mismatch); 4 inconclusive (too few rounds in
every group to judge); 2 unreadable (a file that cannot be read, or no acceptance line of any engine).
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``report`` on the ``dspark-harvest`` subparsers."""
    parser = add_command(
        subparsers,
        "report",
        help="read a server log's DSPARK_HARVEST lines: accept length over time, alarms, probe, verdict",
        description=(
            "Stream one or more server logs (- for stdin, .gz read through gzip, rotated files oldest first) "
            "and report, per attention-DP group, the rounds the plugin logged: accept length over time and "
            "per position, every alarm with its cause, the live probe's verdicts, and a verdict reached from "
            "the rounds themselves (the server's alarm rule replayed), never from what a line claims."
        ),
        run=run,
        epilog=EPILOG,
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="a server log file, or - for stdin")
    parser.add_argument(
        "--decode-log-interval",
        type=_positive,
        default=DEFAULT_DECODE_LOG_INTERVAL,
        metavar="N",
        help="decode batches per sglang decode log line: the server's --decode-log-interval "
        f"(default {DEFAULT_DECODE_LOG_INTERVAL}, sglang's own); weighs sglang's accept len lines",
    )
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the report (needs matplotlib)")
    parser.add_argument(
        REPLACE_FLAG, action="store_true", help="let --plot replace an existing file that is not a PNG"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Read, print, plot; the exit code is the verdict's."""
    from ..logreport import read_logs
    from ..logreport.render import check_plot, plot, text

    try:
        if args.plot:
            check_plot(args.plot, args.logs, args.replace_plot)
        report = read_logs(args.logs, args.decode_log_interval)
        if report.plugin_lines == 0 and report.engine_lines == 0:
            raise UsageError(
                f"no acceptance line in {report.lines} lines: neither the plugin's (was the server "
                "launched with --speculative-algorithm DSPARK_HARVEST?), nor sglang's decode lines "
                "(accept len), nor vLLM's SpecDecoding metrics; is the log level INFO or lower?",
                where=", ".join(args.logs),
            )
        found = report.to_json()
        if args.plot:
            plot(found, args.plot, args.replace_plot)
    except DsparkHarvestError as exc:
        return refuse(exc, "report", args.json, sys.stdout if args.json else sys.stderr)
    emit(sys.stdout, args.json, lambda: found, lambda: text(found))
    return int(found["exit_code"])


__all__ = ["add_parser", "run"]
