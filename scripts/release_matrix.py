"""Measure the plugin on each sglang release: a virtual environment per release, `doctor` and the
argument-level tests in it, and a markdown table of what happened.

    python scripts/release_matrix.py run [RELEASE ...] [--keep-venvs] [--docs docs/sglang.md]
    python scripts/release_matrix.py table [RELEASE ...] [--docs docs/sglang.md]
    python scripts/release_matrix.py releases            # the releases `run` measures by default

`run` measures one release at a time (default: every release on the package index from 0.5.17 to
0.5.23, patch releases included): it creates $DSPARK_VENVS/release-X (default
~/.cache/sglang-dspark-plugin/venvs), installs ``sglang==X`` with the tests' extras
(``scripts/env_spec.py release X``) and this checkout (editable), records the installed torch and
what this sglang offers (``FEATURES_PROBE``), runs ``dspark-harvest doctor`` and
``pytest tests/sglang --deselect tests/sglang/test_served.py`` (argument level: no serving engine)
with ``DSPARK_EXPECT_SGLANG=X``, and writes the result to $DSPARK_VENVS/release-matrix/X.json. The
release's environment is deleted after its run unless ``--keep-venvs`` (each is 6-11 GB; a later
``--reuse-venvs`` run measures again in it, without installing); the free disk is checked before each
install. `table` prints the table of the recorded results; ``--docs``
also replaces the table between the ``release-matrix`` markers of that file. The environments
scripts/setup_envs.sh makes are never touched (only ``release-*`` folders are created or deleted).

``--without NAME`` installs the release without one of its own dependencies (its wheel with
``--no-deps``, then its other requirements): sglang 0.5.18 to 0.5.22 pin ``cuda-tile==1.6.0rc5``, a
placeholder that downloads the real wheel from pypi.nvidia.com, so where that host is unreachable run
them with ``--without cuda-tile`` (nothing under ``sglang/`` imports it); the table says which rows
were installed so. pip's own settings apply (``PIP_*`` variables): a find-links folder that holds a
CPU build of the torch a release pins makes pip take that build beside the index's CUDA torchvision,
which then fails to load (``operator torchvision::nms does not exist``; the torch column shows
``+cpu``); ``PIP_FIND_LINKS=" "`` keeps such a folder out of the run.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import env_spec  # noqa: E402

LOWEST, HIGHEST = (0, 5, 17), (0, 5, 23)
SERVED_DESELECT = (
    "--deselect",
    "tests/sglang/test_served.py",
    "--deselect",
    "tests/sglang/test_gpu_validate_cpu.py",
)
"""The served tests (a serving engine each): left to CI's two versions."""
MIN_FREE_GB = 15.0
BEGIN, END = "<!-- release-matrix:begin -->", "<!-- release-matrix:end -->"

FEATURES_PROBE = """
import importlib.util as u, inspect, json
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.dspark_components import dspark_config
from sglang.srt.arg_groups import overrides
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
has = lambda m: u.find_spec(m) is not None
dispatch = inspect.getsource(SpeculativeAlgorithm.build_disagg_draft_input)
route = ("resolution_hooks" if has("sglang.srt.arg_groups.resolution_hooks")
         else "resolve_once" if hasattr(ServerArgs, "resolve_once") else "__post_init__")
print(json.dumps({
    "resolution": route,
    "foreign_defaults": hasattr(overrides, "record_foreign_defaults"),
    "mask_fill_dspark": hasattr(dspark_config, "get_dspark_sample_from_anchor"),
    "disaggregation": [a for a in ("EAGLE", "DFLASH", "DSPARK")
                       if has(f"sglang.srt.speculative.{a.lower()}_disaggregation")
                       and f"{a.lower()}_disaggregation" in dispatch],
}))
"""
"""What the release offers that the plugin's adapter keys on, read in its environment (PD draft input:
the builtins whose ``*_disaggregation`` module ``build_disagg_draft_input`` dispatches to)."""


def venvs_dir() -> Path:
    return Path(os.environ.get("DSPARK_VENVS", Path.home() / ".cache/sglang-dspark-plugin/venvs"))


def release_key(version: str) -> tuple[int, ...] | None:
    """``(0, 5, 20, 0)`` for ``0.5.20``, ``(0, 5, 15, 1)`` for ``0.5.15.post1``; None for a pre-release."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    return None if match is None else tuple(int(g or 0) for g in match.groups())


def in_range(versions: list[str], lowest: tuple[int, ...], highest: tuple[int, ...]) -> list[str]:
    """The final releases between ``lowest`` and ``highest`` (their patch releases included), in order."""
    keyed = [(key, v) for v in versions if (key := release_key(v)) is not None]
    return [v for key, v in sorted(keyed) if lowest <= key[:3] <= highest]


def index_releases() -> list[str]:
    """The sglang releases on the package index, from ``pip index versions sglang``."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("Available versions:")), None)
    if line is None:
        raise SystemExit(f"`pip index versions sglang` listed no versions:\n{out}")
    return [v.strip() for v in line.split(":", 1)[1].split(",")]


def parse_junit(path: Path) -> dict[str, Any]:
    """Counts and the first failing test with the first line of its reason, from pytest's junit XML."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in root.iter("testcase"):
        problem = next((c for c in case if c.tag in ("failure", "error")), None)
        if problem is not None:
            reason = (problem.get("message") or problem.text or "").strip().splitlines() or [""]
            failed.append(f"{case.get('classname')}::{case.get('name')}: {reason[0][:300]}")
    first = None if not failed else failed[0].split("::", 1)[1][:200]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "passed": passed, "first_failure": first, "failed": failed}


def doctor_summary(returncode: int, output: str) -> dict[str, Any]:
    """The doctor's exit status and its key lines (the sglang line, what is missing, the problems, the
    verdict)."""
    keep = ("sglang: ", "  MISSING", "problem: ", "doctor: ", "DSPARK_HARVEST registered")
    return {"returncode": returncode, "lines": [ln for ln in output.splitlines() if ln.startswith(keep)]}


def check_disk(where: Path) -> float:
    """The free space (GB) where the environment goes; exits when it is below ``MIN_FREE_GB``."""
    where.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(where).free / 1e9
    if free < MIN_FREE_GB:
        raise SystemExit(f"{free:.1f} GB free in {where}: a release's environment needs {MIN_FREE_GB} GB")
    return free


def sh(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    print("[release-matrix] $", " ".join(cmd), flush=True)
    return subprocess.run(cmd, text=True, cwd=ROOT, **kwargs)


def release_requires(wheel: Path) -> list[str]:
    """The wheel's own requirements (``Requires-Dist``), those of its extras left out."""
    with zipfile.ZipFile(wheel) as whl:
        name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(whl.read(name).decode())
    return [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]


def sglang_without(py: str, version: str, without: list[str], where: Path) -> list[str]:
    """What installs ``sglang==version`` minus the named dependencies: the release's wheel (installed
    with ``--no-deps``) and its other requirements."""
    sh([py, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(where)], check=True)
    wheel = next(where.glob(f"sglang-{version}-*.whl"))
    left_out = {env_spec._name(n) for n in without}
    reqs = [r for r in release_requires(wheel) if env_spec._name(r) not in left_out]
    sh([py, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    return reqs


def make_venv(venv: Path, version: str, without: list[str]) -> None:
    """A fresh environment with ``sglang==version`` (less ``without``), the tests' extras and this
    checkout (editable)."""
    reqs = env_spec.release_requirements(env_spec._project(), version)
    shutil.rmtree(venv, ignore_errors=True)
    sh([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    sh([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    if without:
        with tempfile.TemporaryDirectory() as tmp:
            reqs = [r for r in reqs if env_spec._name(r) != "sglang"]
            reqs += sglang_without(py, version, without, Path(tmp))
    sh([py, "-m", "pip", "install", "-q", *reqs], check=True)
    sh([py, "-m", "pip", "install", "-q", "--no-deps", "-e", "."], check=True)


def probe(py: str, code: str) -> Any:
    proc = sh([py, "-c", code], capture_output=True)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_tests(py: str, version: str) -> dict[str, Any]:
    """The argument-level sglang tests (no serving engine) against this release."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [py, "-m", "pytest", "tests/sglang", "-q", *SERVED_DESELECT]
        cmd += ["-p", "no:cacheprovider", f"--junitxml={xml}"]
        proc = sh(cmd, env={**os.environ, "DSPARK_EXPECT_SGLANG": version}, capture_output=True)
        tail = proc.stdout.strip().splitlines()[-1:] or [""]
        if not xml.exists():  # pytest ended before writing it (a collection error, a signal)
            why = (proc.stderr.strip().splitlines() or [f"pytest exited {proc.returncode}, no report"])[-1]
            return {"returncode": proc.returncode, "summary": tail[0], "first_failure": why[:200]}
        return {"returncode": proc.returncode, "summary": tail[0], **parse_junit(xml)}


def measure(version: str, keep: bool, without: list[str], reuse: bool = False) -> dict[str, Any]:
    """Install one release (``reuse``: keep an environment a kept run left), run the doctor and the
    tests in it; the environment is deleted unless ``keep``."""
    venv = venvs_dir() / f"release-{version}"
    free = round(check_disk(venvs_dir()), 1)
    result: dict[str, Any] = {"release": version, "free_gb_before": free, "without": without}
    try:
        if not (reuse and (venv / "bin" / "dspark-harvest").exists()):
            make_venv(venv, version, without)
    except subprocess.CalledProcessError as err:
        shutil.rmtree(venv, ignore_errors=True)
        return {**result, "install_error": f"`{' '.join(map(str, err.cmd))[-120:]}` exited {err.returncode}"}
    py = str(venv / "bin" / "python")
    try:
        doctor = sh([str(venv / "bin" / "dspark-harvest"), "doctor"], capture_output=True)
        return {
            **result,
            "torch": probe(py, "import json, torch; print(json.dumps(torch.__version__))"),
            "features": probe(py, FEATURES_PROBE),
            "doctor": doctor_summary(doctor.returncode, doctor.stdout),
            "tests": run_tests(py, version),
        }
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)


def results_dir() -> Path:
    return venvs_dir() / "release-matrix"


def load_results(versions: list[str] | None) -> list[dict[str, Any]]:
    found = {p.stem: json.loads(p.read_text()) for p in results_dir().glob("*.json")}
    chosen = versions or list(found)
    return [found[v] for v in in_range(chosen, (0, 0, 0), (99, 0, 0)) if v in found]


def _doctor_cell(doctor: dict[str, Any]) -> str:
    """``OK`` or ``FAILED``, with the entries it reports missing (their last two name parts)."""
    missing = [ln.split()[1] for ln in doctor["lines"] if ln.startswith("  MISSING")]
    short = [".".join(m.split(".")[-2:]) for m in missing]
    verdict = "OK" if doctor["returncode"] == 0 else "FAILED"
    return verdict + (f" (missing: {', '.join(short)})" if short else "")


def _features_cell(features: dict[str, Any]) -> str:
    if "error" in features:
        return f"probe failed: {features['error']}"
    mask_fill = "yes" if features["mask_fill_dspark"] else "no"
    pd = ", ".join(features["disaggregation"]) or "none"
    return f"resolution: {features['resolution']}; mask-fill DSPARK: {mask_fill}; PD draft input: {pd}"


def _row(r: dict[str, Any]) -> str:
    if "install_error" in r:
        return f"| {r['release']} | - | not run | - | install failed: {r['install_error']} | - |"
    t = r["tests"]
    counts = f"{t.get('passed', '?')} / {t.get('failures', '?')} / {t.get('errors', '?')}"
    first = (t.get("first_failure") or "none").replace("|", "\\|").replace("\n", " ")
    release = r["release"] + (f" (without {', '.join(r['without'])})" if r.get("without") else "")
    return (
        f"| {release} | {r['torch']} | {_doctor_cell(r['doctor'])} | {counts} | {first} | "
        f"{_features_cell(r['features'])} |"
    )


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table of recorded results, one row a release."""
    head = [
        "| release | torch | doctor | tests passed / failed / errors | first failure "
        "| what this sglang offers |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join([*head, *map(_row, results)])


def write_docs(path: Path, text: str) -> None:
    """Replace what lies between the ``release-matrix`` markers of ``path`` with ``text``."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to replace")
    head, rest = doc.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "table", "releases"))
    parser.add_argument(
        "releases", nargs="*", help="sglang versions (default: 0.5.17 .. 0.5.23 on the index)"
    )
    parser.add_argument("--keep-venvs", action="store_true", help="keep each release's environment")
    parser.add_argument(
        "--reuse-venvs", action="store_true", help="measure in an environment a --keep-venvs run left"
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="NAME",
        help="install the release without this dependency of sglang's (one it cannot fetch here)",
    )
    parser.add_argument("--docs", type=Path, help="also write the table into this file's marked block")
    args = parser.parse_args(argv)
    if args.command == "releases":
        print("\n".join(in_range(index_releases(), LOWEST, HIGHEST)))
        return 0
    if args.command == "run":
        for version in args.releases or in_range(index_releases(), LOWEST, HIGHEST):
            result = measure(version, args.keep_venvs, args.without, args.reuse_venvs)
            results_dir().mkdir(parents=True, exist_ok=True)
            (results_dir() / f"{version}.json").write_text(json.dumps(result, indent=1))
    text = table(load_results(args.releases or None))
    print(text)
    if args.docs:
        write_docs(args.docs, text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
