"""The pip requirements of one test environment, read from pyproject.toml (the one place they live).

    python scripts/env_spec.py requirements main   # one requirement a line: what pip install ".[extras]" pins
    python scripts/env_spec.py stamp main          # a digest of everything those arguments resolve from
    python scripts/env_spec.py names               # the environments pyproject.toml defines
    python scripts/env_spec.py release 0.5.20      # a release's environment: sglang==0.5.20 and the tests'

The requirements are the package's own dependencies, the environment's extras (what ``pip install
".[test,plot,metrics]"`` would install, listed rather than built, so that the environments can be created
side by side without building this checkout three times at once) and its pins. ``setup_envs.sh`` rebuilds an
environment when they change (its stamp is their digest), and for nothing else in pyproject.toml.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _project() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


def envs(project: dict[str, Any]) -> dict[str, Any]:
    return project["tool"]["sglang-dspark-plugin"]["envs"]


def _extra(project: dict[str, Any], extra: str) -> list[str]:
    """An extra's requirements, with this package's own extras it names (``name[plot,metrics]``) expanded."""
    own = project["project"]["name"]
    out: list[str] = []
    for requirement in project["project"]["optional-dependencies"][extra]:
        if _name(requirement) == own:
            inner = requirement[requirement.index("[") + 1 : requirement.index("]")]
            out += [r for e in inner.split(",") for r in _extra(project, e.strip())]
        else:
            out.append(requirement)
    return out


def requirements(project: dict[str, Any], name: str) -> list[str]:
    return requirements_of(project, envs(project)[name])


def release_requirements(project: dict[str, Any], version: str) -> list[str]:
    """The environment of one sglang release (scripts/release_matrix.py): the tests' extras and
    ``sglang==version``, the torch that release pins."""
    return requirements_of(project, {"extras": ["test"], "pins": [f"sglang=={version}"]})


def requirements_of(project: dict[str, Any], env: dict[str, Any]) -> list[str]:
    extras = [r for extra in env["extras"] for r in _extra(project, extra)]
    listed = list(dict.fromkeys([*project["project"]["dependencies"], *extras]))
    pinned = {_name(pin) for pin in env["pins"]}
    return [*(r for r in listed if _name(r) not in pinned), *env["pins"]]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def stamp(project: dict[str, Any], name: str) -> str:
    return hashlib.sha256("\n".join(requirements(project, name)).encode()).hexdigest()[:16]


def main(argv: list[str]) -> int:
    project = _project()
    if argv == ["names"]:
        print("\n".join(envs(project)))
        return 0
    if len(argv) == 2 and argv[0] == "release":
        print("\n".join(release_requirements(project, argv[1])))
        return 0
    if len(argv) != 2 or argv[0] not in ("requirements", "stamp") or argv[1] not in envs(project):
        print(
            f"usage: env_spec.py requirements|stamp {{{','.join(envs(project))}}} | names | release X",
            file=sys.stderr,
        )
        return 2
    command, name = argv
    print("\n".join(requirements(project, name)) if command == "requirements" else stamp(project, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
