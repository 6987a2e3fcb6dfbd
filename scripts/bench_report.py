"""How fast ``dspark-harvest report`` reads a log: writes a synthetic server log of the given size (the
plugin's per-round lines at batch 1-16 between sglang's own lines, a summary every 100 rounds, a request
log line imitating the plugin's every 1000), then times ``read_logs`` on it, repeated; prints MB/s and
the time for 1 GB with the spread over the repeats. Peak memory is printed too (``ru_maxrss``).

    python scripts/bench_report.py                # 256 MB, 3 repeats
    python scripts/bench_report.py --mb 1024 --repeats 2
    python scripts/bench_report.py --hostile          # the hostile inputs, each in a fresh process

``--hostile`` holds the floor docs/report.md states on inputs written to hurt: blank lines, one line
with no newline, a small .gz holding one long line, runs of blanks after a marker, and ``--plot`` with
4,096 DP groups (the documented maximum). Each case runs in its own process, so its peak memory
(``ru_maxrss``) is its own; each prints its time (repeated), its throughput and its peak.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_dspark_plugin.logreport import read_logs  # noqa: E402

PREFIX = "[2026-12-03 10:00:00 TP0] "
SGLANG = (
    PREFIX + "Decode batch, #running-req: 12, #token: 30412, token usage: 0.12, accept len: 2.91, "
    "accept rate: 0.27, cuda graph: True, gen throughput (token/s): 812.33, #queue-req: 0\n"
)
QUOTED = (
    PREFIX + "Receive: obj=GenerateReqInput(text='dspark accept round=1 bs=1 accept_len=[1] mean=1.00 "
    "harvest=dspark(census)')\n"
)


def write_log(path: Path, megabytes: int, gamma: int = 7) -> int:
    """A synthetic log of about ``megabytes`` MB; returns the number of per-round lines."""
    rng = random.Random(0)
    target, size, rounds = megabytes * 1024 * 1024, 0, 0
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            PREFIX + f"dspark accept telemetry: harvest=dspark(census) gamma={gamma} per_round_level=INFO "
            "summary_every=100 alarm=mean<1.60 over 500 rounds after 500 metrics=on\n"
        )
        chunk: list[str] = []
        while size < target:
            rounds += 1
            lengths = [rng.randint(1, gamma + 1) for _ in range(rng.randint(1, 16))]
            mean = sum(lengths) / len(lengths)
            chunk.append(
                f"{PREFIX}dspark accept round={rounds} bs={len(lengths)} "
                f"accept_len=[{','.join(map(str, lengths))}] mean={mean:.2f} harvest=dspark(census)\n"
            )
            if rounds % 40 == 0:
                chunk.append(SGLANG)
            if rounds % 1000 == 0:
                chunk.append(QUOTED)
            if len(chunk) >= 10_000:
                text = "".join(chunk)
                out.write(text)
                size += len(text)
                chunk = []
        out.write("".join(chunk))
    return rounds


def _hostile_input(case: str, folder: Path, mb: int) -> list[str]:
    """Write the input of ``case`` (about ``mb`` MB unpacked); the report's arguments."""
    path = folder / "hostile.log"
    mib = 1024 * 1024

    def write(piece: bytes, times: int, tail: bytes = b"", opener: Any = open) -> None:
        with opener(path, "wb") as out:  # a piece at a time: the writer's memory stays small
            for _ in range(times):
                out.write(piece)
            out.write(tail)

    if case == "blank-lines":
        write(b"\n" * mib, mb)
    elif case == "one-line":
        write(b"dspark accept " * (mib // 14), mb)
    elif case == "gz-one-line":
        import gzip

        path = folder / "hostile.log.gz"
        write(b"x" * mib, mb, b" dspark accept \n", lambda p, m: gzip.open(p, m, compresslevel=1))
    elif case == "marker-blanks":
        line = b"[t] dspark accept ALARM (context): " + b" " * 100_000 + b"x\n"
        write(line * 10, max(1, mb * mib // (10 * len(line))))
    elif case == "plot-4096-groups":
        with open(path, "w", encoding="utf-8") as text:
            for dp in range(4096):
                for n in range(1, 4):
                    text.write(
                        f"{PREFIX}dspark accept round={n} bs=2 accept_len=[2,3] mean=2.50 "
                        f"harvest=dspark(census) dp={dp}\n"
                    )
    return [str(path)]


HOSTILE = ("blank-lines", "one-line", "gz-one-line", "marker-blanks", "plot-4096-groups")


def run_case(case: str, mb: int, repeats: int) -> None:
    """One hostile case, in this process: time (repeated), throughput and this process's peak."""
    from sglang_dspark_plugin.cli import main as cli

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        paths = _hostile_input(case, folder, mb)
        size = sum(os.path.getsize(p) for p in paths) / 1e6
        if case == "gz-one-line":
            size = mb * 1024 * 1024 / 1e6  # what the reader unpacks
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            if case.startswith("plot"):
                plot = str(folder / f"r{i}.png")
                with open(os.devnull, "w") as quiet:
                    stdout, sys.stdout = sys.stdout, quiet
                    try:
                        cli(["report", *paths, "--plot", plot])
                    finally:
                        sys.stdout = stdout
            else:
                read_logs(paths)
            times.append(time.perf_counter() - start)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mean = statistics.mean(times)
    spread = statistics.stdev(times) if len(times) > 1 else 0.0
    rate = "" if case.startswith("plot") else f", {size / mean:.1f} MB/s"
    print(
        f"{case:18s} {size:8.1f} MB  {mean:6.2f} s +- {spread:.2f} ({min(times):.2f}..{max(times):.2f}, "
        f"{len(times)} repeats){rate}, peak {rss:.0f} MB (the whole process)"
    )


def hostile(mb: int, repeats: int) -> int:
    """Every hostile case, each in a fresh process."""
    import subprocess

    for case in HOSTILE:
        command = [sys.executable, __file__, "--case", case, "--mb", str(mb), "--repeats", str(repeats)]
        subprocess.run(command, check=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=None, help="log size (default 256; --hostile: 64)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hostile", action="store_true", help="the hostile inputs instead")
    parser.add_argument("--case", choices=HOSTILE, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run_case(args.case, args.mb or 64, args.repeats)
        return 0
    if args.hostile:
        return hostile(args.mb or 64, args.repeats)
    args.mb = args.mb or 256
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "server.log"
        rounds = write_log(path, args.mb)
        mb = os.path.getsize(path) / 1e6
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            report = read_logs([str(path)])
            times.append(time.perf_counter() - start)
        group = report.to_json()["groups"][0]
        assert group["rounds"] == rounds, (group["rounds"], rounds)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mean = statistics.mean(times)
    spread = statistics.stdev(times) if len(times) > 1 else 0.0
    print(f"log: {mb:.0f} MB, {report.lines} lines, {rounds} per-round lines")
    print(
        f"read_logs: {mean:.2f} s +- {spread:.2f} s over {len(times)} repeats "
        f"({min(times):.2f}..{max(times):.2f})"
    )
    print(f"throughput: {mb / mean:.1f} MB/s; 1 GB (1000 MB) in {1000 / (mb / mean):.1f} s")
    print(f"peak memory (this process, log writer included): {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
