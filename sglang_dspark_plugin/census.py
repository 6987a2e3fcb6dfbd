"""The checkpoint census: which training strategy a DFlash-family draft checkpoint was trained with.

It reads config.json, the safetensors headers (the 8 length bytes and the header of each file, never
the data), ``model.safetensors.index.json`` and, where one sits in the folder, the ``strategy`` field
of a SpecForge ``training_state.pt`` (unpickled without loading a tensor). No tensor data is read
and torch is never imported. Every file is checked to be a regular file before it is opened, and
every read is bounded (``checkpoint_files``).

Signals come in tiers (DESIGN section 3). Tier 1: explicit declarations. Tier 2: structural
defaults. The highest tier that has votes decides; votes inside it must agree, otherwise
``DflashCfg.conflict`` says why (an explicit ``MEMRA_DSPARK_HARVEST`` may still serve it). No vote at
all: the historical default, mask-fill.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .architectures import DFLASH_ARCHITECTURES, DOMINO_ARCHITECTURES, DSPARK_ARCHITECTURES
from .checkpoint_files import (
    MAX_CONFIG_BYTES,
    describe,
    list_dir,
    open_regular,
    printable,
    read_index,
    read_json,
    read_safetensors_header,
    stat_path,
)
from .draft_config import (
    TIER_EXPLICIT,
    TIER_INFO,
    TIER_STRUCTURAL,
    VOTE_DFLASH,
    VOTE_DSPARK,
    DflashCfg,
    Signal,
)
from .errors import InvalidCheckpointError, UnsupportedCheckpointError
from .geometry import MAX_BLOCK_SIZE

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
TRAINING_STATE = "training_state.pt"

DSPARK_PROJECTORS = frozenset({"dspark", "dspark_v4"})
SPECULATORS_TYPES = {"dflash": VOTE_DFLASH, "dflash2": VOTE_DFLASH, "dspark": VOTE_DSPARK}
STRATEGIES = {"dflash": VOTE_DFLASH, "dspark": VOTE_DSPARK}
# sglang reads these on a TARGET config that bundles its DSpark draft head.
SGLANG_BUNDLE_KEYS = (
    "dspark_block_size",
    "dspark_noise_token_id",
    "dspark_target_layer_ids",
    "dspark_markov_rank",
)

MARKOV_PREFIXES = ("markov_head.", "logit_head.markov_head.")
# Every Markov head type has these two tables, both [vocab_size, markov_rank] (sglang models/dspark.py).
MARKOV_TABLES = ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight")
DOMINO_PREFIXES = ("prefix_gru.", "embed_proj.", "logit_head.prefix_gru.", "logit_head.embed_proj.")
INFO_PREFIXES = ("candidate_selector.", "confidence_head.", "logit_head.confidence_head.")

DOMINO_MESSAGE = (
    "Domino drafters use a third geometry (a GRU prefix conditions each row, and shift_label picks "
    "rows 0..b-2 or 1..b-1), which this plugin does not serve; use sglang's own DFLASH/Domino "
    "path for this checkpoint."
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# -- the public function -------------------------------------------------------------------------


def census(path_or_hub_id: str | os.PathLike[str]) -> DflashCfg:
    """Read a draft checkpoint folder (or a hub id already in the local HF cache) without its weights.

    Returns the ``DflashCfg`` with every signal, its tier and its vote. Raises
    ``InvalidCheckpointError`` (missing, malformed or out-of-range input) or
    ``UnsupportedCheckpointError`` (Domino, not a DFlash-family drafter); contradictory evidence
    is not raised here but recorded in ``DflashCfg.conflict``.
    """
    folder = resolve_checkpoint(path_or_hub_id)
    config = _read_config(folder)
    tensor_names, markov_tables = _read_tensor_names(folder)
    strategy = _read_training_strategy(folder / TRAINING_STATE)
    return _Census(str(folder), config, tensor_names, strategy, markov_tables=markov_tables).run()


# -- locating and reading the files --------------------------------------------------------------


def _hf_hub_cache() -> str:
    """The hub cache folder, read from the environment now (huggingface_hub reads it at import)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return cache
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return os.path.join(home, "hub")


def resolve_checkpoint(path_or_hub_id: str | os.PathLike[str]) -> Path:
    """A local checkpoint folder for a path or a hub id; never downloads."""
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
    try:
        path = Path(text).expanduser()
    except RuntimeError as exc:  # ~user of an unknown user, or ~ without a home directory
        raise InvalidCheckpointError(
            f"checkpoint {printable(repr(text), 120)}: cannot expand the leading ~ ({describe(exc)}); "
            "pass the folder's full path.",
            where=printable(text, 120),
        ) from exc
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
        return _from_hf_cache(text)
    raise InvalidCheckpointError(
        f"checkpoint {printable(repr(text), 200)} does not exist; pass a local folder holding config.json, "
        "or a hub id (org/name) already in the local Hugging Face cache.",
        where=printable(text, 200),
    )


def _from_hf_cache(repo_id: str) -> Path:
    cache = _hf_hub_cache()
    fetch = f"huggingface-cli download {repo_id} (or pass a local folder)"
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id, local_files_only=True, cache_dir=cache)
    except ImportError as exc:
        raise InvalidCheckpointError(
            f"{repo_id!r} is not a local folder and huggingface_hub is not installed to look it up "
            f"in the cache ({exc}); pip install huggingface_hub, or pass a local folder.",
            where=repo_id,
        ) from exc
    except Exception as exc:  # LocalEntryNotFoundError, HFValidationError, ... : all mean "not here"
        raise InvalidCheckpointError(
            f"{repo_id!r} is not a local folder and not in the local Hugging Face cache ({cache}): "
            f"{type(exc).__name__}. The census never downloads; fetch it first with {fetch}.",
            where=repo_id,
        ) from exc
    return Path(folder)


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG
    data = read_json(path, "config", MAX_CONFIG_BYTES, "fix or re-export the config.")
    if data is None:
        raise InvalidCheckpointError(
            f"{printable(path)} is missing; a draft checkpoint needs its config.json (a SpecForge export "
            "writes it next to model.safetensors). Pass the folder that holds it.",
            where=printable(path),
        )
    if not isinstance(data, dict):
        raise InvalidCheckpointError(
            f"{printable(path)} holds a JSON {type(data).__name__}, expected an object; fix or re-export "
            "the config.",
            where=printable(path),
        )
    return data


def _read_tensor_names(folder: Path) -> tuple[dict[str, str], dict[str, tuple[str, tuple[int, ...]]]]:
    """Tensor name -> the file that lists it: safetensors headers plus the shard index; and the
    ``MARKOV_TABLES`` the headers list, name -> (file, shape).

    The index's shards are validated (names inside the folder) but need not be present: the census
    reads names, and a config-only download still has its index.
    """
    names: dict[str, str] = {}
    tables: dict[str, tuple[str, tuple[int, ...]]] = {}
    weight_map = read_index(folder / INDEX)
    if weight_map is not None:
        names.update(dict.fromkeys(weight_map, INDEX))
    for entry in list_dir(folder):
        if entry.endswith(".safetensors") and not entry.startswith("."):
            # only the 8 length bytes and the header are read: a shard larger than memory is fine
            header = read_safetensors_header(folder / entry)
            names.update(dict.fromkeys(header, printable(entry)))
            tables.update(
                (n, (printable(entry), t.shape)) for n, t in header.items() if n.endswith(MARKOV_TABLES)
            )
    return names, tables


# -- training_state.pt without torch --------------------------------------------------------------


class _Stub:
    """Stands in for a tensor or storage: never holds data, never runs torch code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


def _rebuild(*args: Any, **kwargs: Any) -> _Stub:
    return _Stub()


_TORCH_REBUILDERS = frozenset(
    {
        "_rebuild_tensor",
        "_rebuild_tensor_v2",
        "_rebuild_tensor_v3",
        "_rebuild_parameter",
        "_rebuild_parameter_with_state",
        "_rebuild_device_tensor_from_numpy",
        "_rebuild_qtensor",
    }
)
# Plain containers a training state may hold; torch.Size is only ever a tuple of ints. torch.save
# pickles with protocol 2, which names the builtins module "__builtin__".
_CONTAINERS: dict[tuple[str, str], type] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch", "Size"): tuple,
    **{(module, "set"): set for module in ("builtins", "__builtin__")},
    **{(module, "frozenset"): frozenset for module in ("builtins", "__builtin__")},
}


class _StateUnpickler(pickle.Unpickler):
    """Unpickles a torch checkpoint's ``data.pkl`` with stand-ins for every tensor and storage."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in _TORCH_REBUILDERS:
            return _rebuild
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            return _Stub
        if (module, name) in _CONTAINERS:
            return _CONTAINERS[module, name]
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")

    def persistent_load(self, pid: Any) -> _Stub:
        return _Stub()


MAX_STATE_PICKLE_BYTES = 32 * 2**20
"""The uncompressed size of a training state's ``data.pkl`` read at most. It holds the structure
only (tensor data sits in other zip members): about 100 bytes per tensor, so SpecForge's states,
optimizer included, stay far below; a pickle beyond it is a decompression bomb, not a state."""


def _read_training_strategy(path: Path) -> Any:
    """The ``strategy`` field of a SpecForge training_state.pt, read without loading tensors.

    ``None`` when there is no such file. The pickle is decompressed into memory only up to
    ``MAX_STATE_PICKLE_BYTES`` and unpickled from there, so a small file cannot expand without bound.
    """
    where = printable(path)
    fix = "remove it from the checkpoint folder or replace it with SpecForge's training_state.pt."
    opened = open_regular(path, "training state", fix)
    if opened is None:
        return None
    handle, _ = opened
    try:
        with handle, zipfile.ZipFile(handle) as archive:
            members = [
                i for i in archive.infolist() if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")
            ]
            if not members:
                raise InvalidCheckpointError(
                    f"{where} is a zip without data.pkl, not a torch checkpoint; {fix}", where=where
                )
            if members[0].file_size > MAX_STATE_PICKLE_BYTES:
                raise InvalidCheckpointError(
                    f"{where}: its data.pkl unpacks to {members[0].file_size} bytes, more than the "
                    f"{MAX_STATE_PICKLE_BYTES} a training state's structure takes; {fix}",
                    where=where,
                )
            with archive.open(members[0]) as member:
                # the declared size bounds what zipfile inflates; read one byte more to be sure
                data = member.read(MAX_STATE_PICKLE_BYTES + 1)
            if len(data) > MAX_STATE_PICKLE_BYTES:
                raise InvalidCheckpointError(
                    f"{where}: its data.pkl unpacks to more than {MAX_STATE_PICKLE_BYTES} bytes; {fix}",
                    where=where,
                )
            state = _StateUnpickler(io.BytesIO(data)).load()
    except InvalidCheckpointError:
        raise
    except Exception as exc:  # BadZipFile, UnpicklingError, EOFError, MemoryError, ...: not usable
        raise InvalidCheckpointError(
            f"{where} cannot be read as a torch zip checkpoint without loading tensors ({describe(exc)}); "
            f"{fix}",
            where=where,
        ) from exc
    if type(state) not in (dict, OrderedDict):
        raise InvalidCheckpointError(
            f"{where} holds a {type(state).__name__}, expected SpecForge's training-state dict; {fix}",
            where=where,
        )
    # dict.get, not state.get: a pickle may give an OrderedDict instance attributes (BUILD), and an
    # attribute named "get" would shadow the method
    return dict.get(state, "strategy", _MISSING)


_MISSING = object()


# -- the census itself ----------------------------------------------------------------------------


@dataclass
class _Census:
    path: str
    config: dict[str, Any]
    tensors: dict[str, str]
    strategy: Any = None
    evidence: list[Signal] = field(default_factory=list)
    markov_tables: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def config_file(self) -> str:
        return os.path.join(self.path, CONFIG)

    # helpers ------------------------------------------------------------------------------------

    def _invalid(self, key: str, value: Any, expected: str, fix: str) -> InvalidCheckpointError:
        return InvalidCheckpointError(
            f"{self.config_file}: {key} = {_short(value)} but {expected}; {fix}",
            where=f"{self.config_file}:{key}",
        )

    def _section(self, *keys: str) -> dict[str, Any] | None:
        """A nested object such as ``dflash_config``; absent or null -> None, wrong type refused."""
        node: Any = self.config
        for depth, key in enumerate(keys):
            node = node.get(key)
            if node is None:
                return None
            if not isinstance(node, dict):
                dotted = ".".join(keys[: depth + 1])
                raise self._invalid(
                    dotted, node, "it must be a JSON object", f"make {dotted} an object or remove it."
                )
        return node

    def _lookups(self, key: str, sections: tuple[tuple[str, ...], ...]) -> list[tuple[str, Any]]:
        """(dotted key, value) of ``key`` in each section where it is present."""
        found = []
        for section in sections:
            node = self.config if not section else self._section(*section)
            if node is not None and key in node:
                found.append((".".join((*section, key)), node[key]))
        return found

    def _signal(self, key: str, value: Any, tier: int, vote: str | None, note: str = "") -> None:
        self.evidence.append(Signal(f"{CONFIG}:{key}", _jsonable(value), tier, vote, note))

    def _agreed(self, values: dict[str, Any], what: str, fix: str) -> tuple[str, Any] | None:
        """The first (key, value) of spellings that must all say the same; None when none is present."""
        if len(set(values.values())) > 1:
            listed = "; ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in values.items())
            raise InvalidCheckpointError(
                f"{self.config_file}: the {what} disagree ({listed}); {fix}",
                where=f"{self.config_file}:{next(iter(values))}",
            )
        return next(iter(values.items()), None)

    def _int(self, key: str, value: Any, *, minimum: int | None, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._invalid(key, value, f"{what} must be an integer", f"set {key} to an integer.")
        if minimum is not None and value < minimum:
            raise self._invalid(key, value, f"{what} must be >= {minimum}", f"fix {key}.")
        return value

    # the run ------------------------------------------------------------------------------------

    def run(self) -> DflashCfg:
        architecture = self._architecture()
        block_size = self._block_size()
        self._explicit(block_size)
        markov_rank = self._structural(architecture)
        vocab_size, hidden_size = self._size("vocab_size"), self._size("hidden_size")
        mask_token_id = self._mask_token_id(vocab_size)
        num_target_layers, target_layer_ids = self._target_layers()
        deciding_tier, conflict = self._decide()
        return DflashCfg(
            path=self.path,
            block_size=block_size,
            architecture=architecture,
            mask_token_id=mask_token_id,
            target_layer_ids=target_layer_ids,
            num_target_layers=num_target_layers,
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            markov_rank=markov_rank,
            evidence=tuple(self.evidence),
            deciding_tier=deciding_tier,
            conflict=conflict,
            raw=self.config,
        )

    def _architecture(self) -> str | None:
        archs = self.config.get("architectures")
        if archs is None:
            return None
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise self._invalid(
                "architectures", archs, "it must be a list of class names", 'write e.g. ["DFlashDraftModel"].'
            )
        return archs[0] if archs else None

    def _block_size(self) -> int | None:
        """The agreed block size; ``None`` when the config gives none (sglang then takes its flag)."""
        sources = [
            *self._lookups("block_size", ((), ("dflash_config",), ("dspark_config",))),
            *self._lookups("block_size", (("speculators_config",), ("transformer_layer_config",))),
            *self._lookups("dspark_block_size", ((),)),
        ]
        values = {  # null: not given
            key: self._int(key, value, minimum=None, what="a block size")
            for key, value in sources
            if value is not None
        }
        agreed = self._agreed(
            values, "block sizes", "keep one value, the width the drafter was trained with."
        )
        if agreed is None:
            return None
        key, b = agreed
        if b < 2:
            raise self._invalid(
                key,
                b,
                "a DFlash-family block needs >= 2 rows (anchor plus at least one mask)",
                "set the width the drafter was trained with.",
            )
        if b > MAX_BLOCK_SIZE:
            raise self._invalid(
                key,
                b,
                f"a block is at most {MAX_BLOCK_SIZE} rows (published drafters use 4..16)",
                "set the width the drafter was trained with.",
            )
        return b

    # tier 1 -------------------------------------------------------------------------------------

    def _explicit(self, block_size: int | None) -> None:
        nests = (
            (),
            ("dflash_config",),
            ("dspark_config",),
            ("speculative_config",),
            ("speculative_config", "dflash_config"),
            ("speculators_config",),
        )
        for key, value in self._lookups("sample_from_anchor", nests):
            self._flag(key, value, on_true=VOTE_DSPARK, meaning="True = anchor-first (shifted)")
        for key, value in self._lookups("query_zero_predicts_next", nests):
            self._flag(key, value, on_true=VOTE_DSPARK, meaning="True = row 0 predicts the next token")
        for key, value in self._lookups("dspark_bonus_anchor", nests):
            self._flag(key, value, on_true=VOTE_DFLASH, meaning="True = the 1+N bonus-anchor layout")
        self._speculative_tokens(block_size)
        self._training_state()

    def _flag(self, key: str, value: Any, *, on_true: str, meaning: str) -> None:
        if value is None:
            self._signal(key, None, TIER_INFO, None, "null: no vote")
            return
        if not isinstance(value, bool):
            raise self._invalid(
                key, value, f"it must be true or false ({meaning})", f"set {key} to a boolean."
            )
        other = VOTE_DFLASH if on_true == VOTE_DSPARK else VOTE_DSPARK
        vote = on_true if value else other
        layout = "anchor-first, shifted" if vote == VOTE_DSPARK else "1+N fill-in, mask-fill"
        self._signal(key, value, TIER_EXPLICIT, vote, f"{str(value).lower()}: {layout}")

    def _speculative_tokens(self, block_size: int | None) -> None:
        spec = self._section("speculators_config")
        if spec is None:
            return
        declared: list[tuple[str, Any]] = []
        if "speculative_tokens" in spec:
            declared.append(("speculators_config.speculative_tokens", spec["speculative_tokens"]))
        methods = spec.get("proposal_methods")
        if methods is not None:
            if not isinstance(methods, list):
                raise self._invalid(
                    "speculators_config.proposal_methods",
                    methods,
                    "it must be a list of objects",
                    "fix the speculators config.",
                )
            for i, method in enumerate(methods):
                key = f"speculators_config.proposal_methods[{i}]"
                if not isinstance(method, dict):
                    raise self._invalid(key, method, "it must be an object", "fix the speculators config.")
                if "speculative_tokens" in method:
                    declared.append((f"{key}.speculative_tokens", method["speculative_tokens"]))
        for key, value in declared:
            n = self._int(key, value, minimum=None, what="a declared draft count")
            if block_size is None:
                self._signal(key, n, TIER_INFO, None, "no block size to compare it with: no vote")
            elif n == block_size - 1:
                self._signal(key, n, TIER_EXPLICIT, VOTE_DFLASH, f"b-1 drafts for block_size {block_size}")
            elif n == block_size:
                self._signal(key, n, TIER_EXPLICIT, VOTE_DSPARK, f"b drafts for block_size {block_size}")
            else:
                raise self._invalid(
                    key,
                    n,
                    f"a block of {block_size} rows yields {block_size - 1} (mask-fill) or "
                    f"{block_size} (shifted) drafts",
                    "fix speculative_tokens or block_size to the values the drafter was trained with.",
                )

    def _training_state(self) -> None:
        if self.strategy is None:
            return
        where = os.path.join(self.path, TRAINING_STATE)
        signal = f"{TRAINING_STATE}:strategy"
        if self.strategy is _MISSING:
            self.evidence.append(Signal(signal, None, TIER_INFO, None, "no strategy field: no vote"))
            return
        if self.strategy == "domino":
            raise UnsupportedCheckpointError(
                f"{where}: strategy = 'domino'. {DOMINO_MESSAGE}", where=f"{where}:strategy"
            )
        vote = STRATEGIES.get(self.strategy) if isinstance(self.strategy, str) else None
        if vote is None:
            raise UnsupportedCheckpointError(
                f"{where}: strategy = {_short(self.strategy)} is not a DFlash-family training strategy "
                "(expected 'dflash' or 'dspark'); this plugin serves DFlash-family block drafters only.",
                where=f"{where}:strategy",
            )
        self.evidence.append(
            Signal(signal, self.strategy, TIER_EXPLICIT, vote, "the objective that was trained")
        )

    # tier 2 -------------------------------------------------------------------------------------

    def _structural(self, architecture: str | None) -> int | None:
        self._refuse_domino(architecture)
        bundled = [k for k in SGLANG_BUNDLE_KEYS if k in self.config]
        spec_type = self._speculators_type()
        if architecture in DFLASH_ARCHITECTURES:
            self._signal("architectures[0]", architecture, TIER_STRUCTURAL, VOTE_DFLASH)
        elif architecture in DSPARK_ARCHITECTURES:
            self._signal("architectures[0]", architecture, TIER_STRUCTURAL, VOTE_DSPARK)
        elif architecture is not None and not bundled and spec_type is None:
            raise UnsupportedCheckpointError(
                f"{self.config_file}: architectures[0] = {architecture!r} is not a DFlash-family "
                f"drafter (known: {', '.join(sorted(DFLASH_ARCHITECTURES | DSPARK_ARCHITECTURES))}). "
                "Pass the draft checkpoint, not the target; this plugin serves DFlash-family block "
                "drafters only.",
                where=f"{self.config_file}:architectures",
            )
        elif architecture is not None:
            self._signal(
                "architectures[0]", architecture, TIER_INFO, None, "not a drafter class name: no vote"
            )
        if bundled:
            self._signal(
                ", ".join(bundled),
                {k: _jsonable(self.config[k]) for k in bundled},
                TIER_STRUCTURAL,
                VOTE_DSPARK,
                "sglang dspark_* keys: a target config bundling a DSpark draft head",
            )
        for key, value in self._lookups("projector_type", ((), ("dflash_config",))):
            if value is None:
                continue
            if not isinstance(value, str):
                raise self._invalid(key, value, "it must be a string", f"fix {key}.")
            if value in DSPARK_PROJECTORS:
                self._signal(key, value, TIER_STRUCTURAL, VOTE_DSPARK)
            else:
                self._signal(key, value, TIER_INFO, None, "not a DSpark projector: no vote")
        markov_rank = self._markov_rank()
        self._weights()
        self._shift_label()
        return markov_rank

    def _refuse_domino(self, architecture: str | None) -> None:
        reasons = []
        if architecture in DOMINO_ARCHITECTURES:
            reasons.append(f"architectures[0] = {architecture!r}")
        for key, value in self._lookups("projector_type", ((), ("dflash_config",))):
            if value == "domino":
                reasons.append(f"{key} = 'domino'")
        if self.config.get("speculators_model_type") == "domino":
            reasons.append("speculators_model_type = 'domino'")
        gru = sorted(n for n in self.tensors if n.startswith(DOMINO_PREFIXES))
        if gru:
            reasons.append(f"GRU prefix weights ({gru[0]}, ... {len(gru)} tensors)")
        if reasons:
            raise UnsupportedCheckpointError(
                f"{self.path}: a Domino drafter ({'; '.join(reasons)}). {DOMINO_MESSAGE}",
                where=self.config_file,
            )

    def _speculators_type(self) -> str | None:
        key = "speculators_model_type"
        value = self.config.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._invalid(key, value, "it must be a string", f"fix {key}.")
        vote = SPECULATORS_TYPES.get(value.lower())
        if vote is None:
            raise UnsupportedCheckpointError(
                f"{self.config_file}: speculators_model_type = {value!r} is not a DFlash-family drafter "
                f"(known: {', '.join(sorted(SPECULATORS_TYPES))}); this plugin serves DFlash-family "
                "block drafters only.",
                where=f"{self.config_file}:{key}",
            )
        self._signal(key, value, TIER_STRUCTURAL, vote)
        return value

    def _markov_rank(self) -> int | None:
        # every place sglang (dspark_config, text_config, top level, dspark_*) or SpecForge
        # (dflash_config) writes it; they must agree with each other and with the tables' shapes
        spellings = [
            *self._lookups("markov_rank", ((), ("dflash_config",), ("dspark_config",), ("text_config",))),
            *self._lookups("dspark_markov_rank", ((),)),
        ]
        ranks: dict[str, int] = {}
        for key, value in spellings:
            if value is None:
                self._signal(key, None, TIER_INFO, None, "null: no vote")
                continue
            ranks[key] = value = self._int(key, value, minimum=0, what="a Markov rank")
            if value > 0:
                self._signal(key, value, TIER_STRUCTURAL, VOTE_DSPARK, "a Markov head")
            else:
                self._signal(key, value, TIER_INFO, None, "no Markov head: absence is not a vote")
        agreed = self._agreed(ranks, "Markov ranks", "keep the rank the drafter was trained with.")
        if agreed is None:
            return None
        key, rank = agreed
        for name, (file, shape) in sorted(self.markov_tables.items()):
            if len(shape) != 2 or shape[1] != rank:
                raise InvalidCheckpointError(
                    f"{self.config_file}: {key} = {rank} but {file}:{name} has shape {list(shape)}, and "
                    "markov_w1 / markov_w2 are [vocab_size, markov_rank]; set the rank the Markov head "
                    "was trained with, or re-export the checkpoint.",
                    where=f"{self.config_file}:{key}",
                )
        return rank

    def _weights(self) -> None:
        markov = sorted(n for n in self.tensors if n.startswith(MARKOV_PREFIXES))
        if markov:
            self.evidence.append(
                Signal(
                    f"{self.tensors[markov[0]]}:{markov[0].rsplit('markov_head.', 1)[0]}markov_head.*",
                    len(markov),
                    TIER_STRUCTURAL,
                    VOTE_DSPARK,
                    "Markov head tensors",
                )
            )
        for prefix in INFO_PREFIXES:
            found = sorted(n for n in self.tensors if n.startswith(prefix))
            if found:
                self.evidence.append(
                    Signal(
                        f"{self.tensors[found[0]]}:{prefix}*",
                        len(found),
                        TIER_INFO,
                        None,
                        "not a Markov head: no vote",
                    )
                )

    def _shift_label(self) -> None:
        for key, value in self._lookups("shift_label", ((), ("dflash_config",))):
            self._signal(
                key,
                value,
                TIER_INFO,
                None,
                "shift_label only changes Domino's rows; DFlash trainers ignore it (mask-fill)",
            )

    # geometry-adjacent fields ------------------------------------------------------------------

    def _size(self, name: str) -> int | None:
        """The first non-null ``name`` at the top level, in transformer_layer_config or text_config."""
        for key, raw in self._lookups(name, ((), ("transformer_layer_config",), ("text_config",))):
            if raw is not None:
                return self._int(key, raw, minimum=1, what=name)
        return None

    def _mask_token_id(self, vocab_size: int | None) -> int | None:
        found = [
            *self._lookups(
                "mask_token_id",
                ((), ("dflash_config",), ("dspark_config",), ("speculative_config", "dflash_config")),
            ),
            *self._lookups("dspark_noise_token_id", ((),)),
        ]
        values = {k: self._int(k, v, minimum=0, what="a token id") for k, v in found if v is not None}
        agreed = self._agreed(values, "mask token ids", "keep the one used in training.")
        if agreed is None:
            return None
        key, mask = agreed
        if vocab_size is not None and mask >= vocab_size:
            raise self._invalid(
                key,
                mask,
                f"the vocabulary has {vocab_size} tokens (ids 0..{vocab_size - 1})",
                "set the mask token id the drafter was trained with (often len(tokenizer)).",
            )
        return mask

    def _target_layers(self) -> tuple[int | None, tuple[int, ...] | None]:
        n_key = "num_target_layers"
        n = self.config.get(n_key)
        num_target_layers = None if n is None else self._int(n_key, n, minimum=1, what="a layer count")
        found = [
            *self._lookups("target_layer_ids", ((), ("dflash_config",), ("dspark_config",))),
            *self._lookups("dspark_target_layer_ids", ((),)),
        ]
        # speculators' aux_hidden_state_layer_ids name the same layers; used only when nothing else does.
        found = [(k, v) for k, v in found if v is not None] or [
            (k, v) for k, v in self._lookups("aux_hidden_state_layer_ids", ((),)) if v is not None
        ]
        parsed: dict[str, tuple[int, ...]] = {}
        for key, value in found:
            if not isinstance(value, list):
                raise self._invalid(key, value, "it must be a list of layer indices", f"fix {key}.")
            parsed[key] = tuple(
                self._int(f"{key}[{i}]", v, minimum=0, what="a layer index") for i, v in enumerate(value)
            )
            if num_target_layers is not None:
                for i, layer in enumerate(parsed[key]):
                    if layer >= num_target_layers:
                        raise self._invalid(
                            f"{key}[{i}]",
                            layer,
                            f"the target has {num_target_layers} layers (num_target_layers)",
                            "use layer indices 0..num_target_layers-1.",
                        )
        agreed = self._agreed(parsed, "target layer ids", "keep the ones used in training.")
        return num_target_layers, None if agreed is None else agreed[1]

    # the tier rule ------------------------------------------------------------------------------

    def _decide(self) -> tuple[int | None, str | None]:
        voting = [s for s in self.evidence if s.vote is not None]
        if not voting:
            return None, None
        tier = min(s.tier for s in voting)
        deciding = [s for s in voting if s.tier == tier]
        if len({s.vote for s in deciding}) == 1:
            return tier, None
        listed = "; ".join(f"{s.signal} = {_short(s.value)} -> {s.vote}" for s in deciding)
        kind = "explicit declarations" if tier == TIER_EXPLICIT else "structural signals"
        return tier, (
            f"the checkpoint's {kind} (tier {tier}) disagree about its training strategy: {listed}. "
            "Fix the checkpoint's config, or set MEMRA_DSPARK_HARVEST=dflash (mask-fill) or "
            "MEMRA_DSPARK_HARVEST=dspark (shifted) to the strategy it was trained with."
        )


def _jsonable(value: Any) -> Any:
    """The value as JSON would hold it (the config came from JSON, so this is a cheap check)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return _short(value)
    return value


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"<a {type(value).__name__} too deep or too long to print>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["census", "resolve_checkpoint", "DFLASH_ARCHITECTURES", "DSPARK_ARCHITECTURES"]
