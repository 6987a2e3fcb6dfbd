"""Where a checkpoint lives: a local folder, or a hub id at a revision in the Hugging Face cache.

A hub id resolves the way sglang resolves it: a draft's ``--speculative-draft-model-path`` at
``--speculative-draft-model-revision``, a target's ``--model-path`` at ``--revision`` from
``--download-dir`` when given; the same cache, the same revision (a branch or tag through ``refs/``,
or a commit hash). ``inspect`` and ``check`` never download; the serving plan may, as the builtin
would, unless ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ..checkpoint.files import MAX_CONFIG_BYTES, describe, printable, read_bounded, regular_file, stat_path
from ..errors import HubDownloadError, InvalidCheckpointError

CONFIG = "config.json"
DRAFT_REVISION_FLAG = "--speculative-draft-model-revision"

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT_HASH = re.compile(r"[0-9a-f]{40}")
MAX_REF_BYTES = 256
"""A cache ref (``refs/main``) holds one 40-hex commit hash; huggingface_hub reads it whole."""


def resolve_checkpoint(
    path_or_hub_id: str | os.PathLike[str],
    revision: str | None = None,
    *,
    download: bool = False,
    cache_dir: str | None = None,
    allow_patterns: list[str] | None = None,
    flag: str = DRAFT_REVISION_FLAG,
) -> Path:
    """A local checkpoint folder for a path or a hub id at ``revision`` (default ``main``; a local path
    has none), the one resolver of drafts and targets alike.

    A hub id is looked up in ``cache_dir`` (sglang's ``--download-dir``), else the Hugging Face cache;
    with ``download``, a revision missing there is fetched (only the files ``allow_patterns`` match,
    all without) unless ``HF_HUB_OFFLINE``. ``flag`` is the option a malformed revision came from."""
    if not isinstance(path_or_hub_id, (str, os.PathLike)):
        raise InvalidCheckpointError(
            f"checkpoint must be a folder path or a hub id, got {path_or_hub_id!r}; "
            "pass the draft checkpoint folder (the one holding config.json)."
        )
    text = os.fspath(path_or_hub_id)
    if not isinstance(text, str):
        raise InvalidCheckpointError(
            f"checkpoint {printable(repr(text), 120)} is a bytes path; pass it as a string.",
            where="checkpoint",
        )
    path = _expanded(text)
    found = stat_path(path, "checkpoint")
    if found is not None and stat.S_ISDIR(found.st_mode):
        return path
    if found is not None:
        if path.name == CONFIG:
            return path.parent
        raise InvalidCheckpointError(
            f"{printable(text)} is a file; pass the draft checkpoint folder that holds config.json.",
            where=printable(text),
        )
    if _HUB_ID.match(text):  # org/name; a relative path like ./x or ~/x does not match
        return _from_hf_cache(
            text,
            _revision(revision, flag),
            download and not hub_offline(),
            allow_patterns=allow_patterns,
            cache_dir=cache_dir,
        )
    raise InvalidCheckpointError(
        f"checkpoint {printable(repr(text), 200)} does not exist; pass a local folder holding config.json, "
        "or a hub id (org/name) already in the local Hugging Face cache.",
        where=printable(text, 200),
    )


def _expanded(text: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError as exc:  # ~user of an unknown user, or ~ without a home directory
        raise InvalidCheckpointError(
            f"checkpoint {printable(repr(text), 120)}: cannot expand the leading ~ ({describe(exc)}); "
            "pass the folder's full path.",
            where=printable(text, 120),
        ) from exc


def _hf_hub_cache() -> str:
    """The hub cache folder, read from the environment now (huggingface_hub reads it at import)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return cache
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return os.path.join(home, "hub")


def hub_cli() -> str:
    """The command the installed huggingface_hub ships for downloads (``hf`` today, ``huggingface-cli``
    before it), read from its console scripts."""
    from importlib import metadata

    try:
        scripts = metadata.entry_points(group="console_scripts")
    except Exception:  # noqa: BLE001 - a broken distribution elsewhere must not break a hint
        return "hf"
    names = {e.name for e in scripts if e.value.startswith("huggingface_hub")}
    return next((n for n in ("hf", "huggingface-cli") if n in names), "hf")


def check_cache_files(cache: str, repo_id: str, revision: str = "main") -> None:
    """Check the cache files huggingface_hub reads whole before it finds a snapshot: the ref and the
    commit's tree listing. A FIFO there would block the lookup, a device such as /dev/zero would be
    read without end, and a ref that is not a commit hash would name a folder outside ``snapshots``."""
    storage = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    fix = f"delete it (and re-run {hub_cli()} download {repo_id}), or pass a local folder."
    data = read_bounded(storage / "refs" / revision, "Hugging Face cache ref", MAX_REF_BYTES, fix)
    if data is None:
        return  # no ref: huggingface_hub finds nothing and says so
    if not _COMMIT_HASH.fullmatch(data.decode("latin-1")):
        where = printable(storage / "refs" / revision)
        raise InvalidCheckpointError(
            f"{where} holds {printable(repr(data), 80)}, not a 40-hex commit hash as huggingface_hub writes; "
            f"{fix}",
            where=where,
        )
    tree = storage / "trees" / f"{data.decode('ascii')}.json"
    found = regular_file(tree, "Hugging Face cache tree listing", fix)
    if found is not None and found.st_size > MAX_CONFIG_BYTES:
        raise InvalidCheckpointError(
            f"{printable(tree)} is {found.st_size} bytes, more than the {MAX_CONFIG_BYTES} a tree listing "
            f"takes; {fix}",
            where=printable(tree),
        )


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids downloads (huggingface_hub's own truthy spellings)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _revision(revision: str | None, flag: str = DRAFT_REVISION_FLAG) -> str:
    if revision is None:
        return "main"
    if not isinstance(revision, str) or not re.fullmatch(r"[\w.\-/]{1,200}", revision) or ".." in revision:
        raise InvalidCheckpointError(
            f"revision {printable(repr(revision), 80)} is not a branch, tag or commit hash; pass "
            f"{flag} as the hub shows it (e.g. main, v1.0, or 40 hex digits).",
            where=flag,
        )
    return revision


def is_hub_id(text: str) -> bool:
    """Whether ``text`` has the shape of a hub repo id (org/name); a relative path like ./x does not."""
    return bool(_HUB_ID.match(text))


def _fetch_command(repo_id: str, revision: str, cache_dir: str | None) -> str:
    """The download that puts ``repo_id`` at ``revision`` where the lookup reads it."""
    at = "" if revision == "main" else f" --revision {revision}"
    into = "" if cache_dir is None else f" --cache-dir {cache_dir}"
    return f"{hub_cli()} download {repo_id}{at}{into}"


def _from_hf_cache(
    repo_id: str,
    revision: str = "main",
    download: bool = False,
    *,
    allow_patterns: list[str] | None = None,
    cache_dir: str | None = None,
) -> Path:
    cache = cache_dir or _hf_hub_cache()
    at = "" if revision == "main" else f" at revision {revision!r}"
    fetch = _fetch_command(repo_id, revision, cache_dir) + " (or pass a local folder)"
    if not _COMMIT_HASH.fullmatch(revision):
        check_cache_files(cache, repo_id, revision)
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            repo_id,
            revision=revision,
            local_files_only=not download,
            cache_dir=cache,
            allow_patterns=allow_patterns,
        )
    except ImportError as exc:
        raise InvalidCheckpointError(
            f"{repo_id!r} is not a local folder and huggingface_hub is not installed to look it up "
            f"in the cache ({exc}); pip install huggingface_hub, or pass a local folder.",
            where=repo_id,
        ) from exc
    except Exception as exc:  # LocalEntryNotFoundError, HFValidationError, ... : all mean "not here"
        how = (
            "the download failed"
            if download
            else "HF_HUB_OFFLINE is set, so nothing is downloaded"
            if hub_offline()
            else "inspect and check never download"
        )
        error = HubDownloadError if download else InvalidCheckpointError
        raise error(
            f"{repo_id!r}{at} is not a local folder and not in the local Hugging Face cache ({cache}): "
            f"{type(exc).__name__}; {how}. Fetch it first with {fetch}.",
            where=repo_id,
        ) from exc
    return Path(folder)


__all__ = [
    "CONFIG",
    "DRAFT_REVISION_FLAG",
    "MAX_REF_BYTES",
    "check_cache_files",
    "hub_offline",
    "is_hub_id",
    "resolve_checkpoint",
]
