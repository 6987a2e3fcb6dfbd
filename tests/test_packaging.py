"""The install story: the wheel ships what an installed package needs, the extras cover every import of the
sglang-free suite, and the test environments install those extras (the pins live in pyproject.toml only)."""

from __future__ import annotations

import ast
import email
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import env_spec  # noqa: E402

CORE_TESTS = [p for p in (ROOT / "tests").rglob("*.py") if "sglang" not in p.relative_to(ROOT).parts[1:2]]
"""The sglang-free suite: every test module outside tests/sglang."""
LOCAL = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {p.stem for p in (ROOT / "scripts").glob("*.py")}


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """A wheel built from a copy of this checkout (the build writes into its source folder)."""
    root = tmp_path_factory.mktemp("wheel")
    source = shutil.copytree(
        ROOT,
        root / "src",
        ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__"),
    )
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source)]
    proc = subprocess.run([*command, "-w", str(root / "dist")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = (root / "dist").glob("*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_ships_the_models_the_configs_and_the_entry_points(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    package = ROOT / "sglang_dspark_plugin"
    for shipped in [*(package / "embedded").rglob("*"), *(package / "configs").glob("*.*")]:
        if shipped.is_file() and "__pycache__" not in shipped.parts:
            assert shipped.relative_to(ROOT).as_posix() in names, shipped
    assert "sglang_dspark_plugin/py.typed" in names
    info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = wheel.read(info).decode()
    assert "[sglang.srt.plugins]" in entry_points and "dspark-harvest" in entry_points
    metadata = email.message_from_bytes(wheel.read(info.replace("entry_points.txt", "METADATA")))
    assert {"test", "plot", "metrics"} <= set(metadata.get_all("Provides-Extra") or [])


def _third_party_imports() -> set[str]:
    files = [p for p in (ROOT / "sglang_dspark_plugin").rglob("*.py") if "sglang_plugin" not in p.parts]
    names: set[str] = set()
    for path in [*files, *CORE_TESTS]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {
        n
        for n in names
        if n not in sys.stdlib_module_names and n not in LOCAL and n != "sglang_dspark_plugin"
    }


def test_every_import_of_the_sglang_free_suite_is_a_declared_requirement() -> None:
    project = env_spec._project()
    declared = {_normal(env_spec._name(r)) for r in env_spec.requirements(project, "main")}
    distributions = packages_distributions()
    for name in sorted(_third_party_imports()):
        owners = {_normal(d) for d in distributions.get(name, [name])}
        assert owners & declared, f"{name} is imported but no requirement of the main environment provides it"


def test_the_test_environments_install_the_packages_own_extras() -> None:
    project = env_spec._project()
    optional = project["project"]["optional-dependencies"]
    assert "prometheus_client" in " ".join(optional["metrics"])
    # `pip install '.[test]'` alone is enough for the sglang-free suite: test takes in plot and metrics
    assert set(optional["plot"]) | set(optional["metrics"]) <= set(env_spec._extra(project, "test"))
    for name, env in env_spec.envs(project).items():
        listed = env_spec.requirements(project, name)
        for extra in env["extras"]:
            assert set(env_spec._extra(project, extra)) <= set(listed)
        assert set(env["pins"]) <= set(listed)
    # the set-up script lists no requirement of its own: it asks env_spec.py
    script = (ROOT / "scripts" / "setup_envs.sh").read_text()
    assert "env_spec.py" in script
    assert not any(token in script for token in ("torch==", "pytest>=", "transformers>=", "prometheus"))


def test_a_stamp_changes_with_the_requirements_only() -> None:
    project = env_spec._project()
    before = env_spec.stamp(project, "main")
    project["project"]["optional-dependencies"]["metrics"] = ["prometheus_client>=99"]
    assert env_spec.stamp(project, "main") != before
    project["project"]["version"] = "99"
    project["project"]["optional-dependencies"]["metrics"] = ["prometheus_client>=0.17"]
    assert env_spec.stamp(env_spec._project(), "main") == before


def test_the_configs_command_finds_the_shipped_files(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_dspark_plugin.cli import main

    assert main(["configs"]) == 0
    paths = [Path(line) for line in capsys.readouterr().out.splitlines()]
    # the three sglang --config files and the Grafana dashboard
    assert {p.name for p in paths} == {p.name for p in (ROOT / "configs").glob("*.*")} and len(paths) == 4
    assert all(p.is_file() and "sglang_dspark_plugin" in p.parts for p in paths)
    assert main(["configs", "dspark_harvest.yaml"]) == 0
    assert Path(capsys.readouterr().out.strip()).name == "dspark_harvest.yaml"
    assert main(["configs", "missing.yaml", "--json"]) == 2
    assert "dspark_harvest.yaml" in capsys.readouterr().out  # the refusal lists what is shipped
