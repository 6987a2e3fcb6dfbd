"""Prefill-decode disaggregation: both sides must serve the same plan.

A decode server that resolved another harvest, width or checkpoint than its prefill server would
verify drafts against positions they were not trained for: the same silent collapse, across machines.
sglang's transfer carries no plugin state, so the check is made where the decode server starts: with
``MEMRA_DSPARK_PEER_MANIFEST`` pointing at the prefill server's manifest (``MEMRA_DSPARK_MANIFEST``
there), a decode server whose plan differs is refused, naming each field. Without it the decode
server logs a WARNING saying how to turn the check on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..checkpoint.files import MAX_CONFIG_BYTES, MAX_JSON_DEPTH, json_depth, read_bounded
from ..errors import InvalidCheckpointError, printable
from ..settings import PEER_MANIFEST
from .refusal import ALGORITHM, ServeRefusal

COMPARED = (
    "harvest",
    "block_size",
    "gamma",
    "verify_window",
    "sglang_builtin",
    "sample_from_anchor",
    "draft_content",
)
"""The manifest fields both sides of a disaggregated deployment must agree on."""
SHOWN = 120
"""The most characters of one value a refusal repeats (a manifest field can be megabytes long)."""


def _read(path: str) -> dict[str, Any]:
    fix = f"point {PEER_MANIFEST.name} at the manifest the prefill server wrote (its MEMRA_DSPARK_MANIFEST)."
    data = read_bounded(Path(path), "the prefill server's manifest", MAX_CONFIG_BYTES, fix)
    if data is None:
        raise InvalidCheckpointError(
            f"{PEER_MANIFEST.name}={printable(path, limit=200)}: no such file; {fix}",
            where=PEER_MANIFEST.name,
        )
    try:
        manifest = json.loads(data.decode("utf-8"))
        if json_depth(manifest) > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise InvalidCheckpointError(
            f"{PEER_MANIFEST.name}={printable(path, limit=200)}: not a geometry manifest "
            f"({err.__class__.__name__}); {fix}",
            where=PEER_MANIFEST.name,
        ) from err
    if not isinstance(manifest, dict) or "harvest" not in manifest:
        raise InvalidCheckpointError(
            f"{PEER_MANIFEST.name}={printable(path, limit=200)}: not a geometry manifest; {fix}",
            where=PEER_MANIFEST.name,
        )
    return manifest


def check_peer(mode: str | None, peer_path: str | None, manifest: dict[str, Any]) -> str | None:
    """Refuse a decode server whose plan differs from its prefill server's; the WARNING to log when the
    check cannot run (a decode server without ``MEMRA_DSPARK_PEER_MANIFEST``), else ``None``."""
    if mode != "decode":
        return None
    if not peer_path:
        return (
            f"a decode server without {PEER_MANIFEST.name}: nothing checks that the prefill server serves "
            "the same harvest, width and checkpoint (a mismatch is the silent collapse, across machines). "
            f"Set MEMRA_DSPARK_MANIFEST on the prefill server and {PEER_MANIFEST.name} here to that file."
        )
    peer = _read(peer_path)
    differing = {k: (peer.get(k), manifest.get(k)) for k in COMPARED if peer.get(k) != manifest.get(k)}
    if differing:
        listed = "; ".join(
            f"{k}: prefill {printable(repr(a), SHOWN)}, decode {printable(repr(b), SHOWN)}"
            for k, (a, b) in differing.items()
        )
        raise ServeRefusal(
            f"{ALGORITHM}: this decode server's plan differs from its prefill server's "
            f"({printable(peer_path, limit=200)}): {listed}. Give both sides the same draft (the same "
            "checkpoint content), the same MEMRA_DSPARK_HARVEST and the same width flags.",
            kind="unsupported",
            where=PEER_MANIFEST.name,
        )
    return None


__all__ = ["COMPARED", "check_peer"]
