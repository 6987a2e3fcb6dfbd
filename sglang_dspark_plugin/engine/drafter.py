"""The DFlash-family block drafter (z-lab dflash / SpecForge backbone) and its checkpoint loader.

One drafter forward maps a block ``[anchor, MASK x (q-1)]`` (embedded with the TARGET's input
embeddings) to ``q`` hidden rows; logits are ``target.lm_head(rows)``. Each layer (``layers``) is a
Qwen3 decoder layer whose queries come from the block rows only and whose keys/values are
``[proj(context) ; proj(block)]``, where ``context = hidden_norm(fc(target features))``. The block is
non-causal and sees every cached context row, exactly like z-lab ``dflash/model.py`` and SpecForge
``dflash.py``; the parameter names are theirs, so their checkpoints load unchanged.

The two training strategies (DFlash mask-fill, DSpark shifted) share this backbone; which rows to
harvest is the business of ``DsparkHarvest``, not of the model. A DSpark checkpoint may add a Markov
head (``markov_head.*``: each draft's logits get a bias from the previous draft, see ``markov``) and a
confidence head (``confidence_head.*``); both load under sglang's and SpecForge's names (``weights``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import InvalidCheckpointError, MissingBlockSizeError, printable
from .formats import engine_config, engine_layer_ids, export_format
from .layers import DraftCache, DraftLayer, LayerInputs, RMSNorm, RotaryEmbedding, rope_theta
from .markov import ConfidenceHead, VanillaMarkov, build_markov_head, describe_heads
from .preflight import check_model_settings, check_sizes_before_allocating
from .weights import check_state_fits, head_keys, header_shapes, read_state_dict

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg


class DFlashDraftModel(nn.Module):
    """The DFlash-family drafter backbone (no embedding and no lm_head: both are the target's).

    ``config`` holds the Qwen3 settings of the layers and the DSpark head keys; ``block_size`` is the
    rows of a block, ``mask_token_id`` the token of its MASK rows, ``target_layer_ids`` the target
    layers whose outputs the drafter reads.
    """

    def __init__(
        self, config: Any, *, block_size: int, mask_token_id: int, target_layer_ids: Sequence[int]
    ) -> None:
        super().__init__()
        self.config = config
        self.block_size = int(block_size)
        self.mask_token_id = int(mask_token_id)
        self.target_layer_ids = [int(i) for i in target_layer_ids]
        if not self.target_layer_ids:
            raise InvalidCheckpointError(
                "dflash_config.target_layer_ids is missing or empty; set it to the target layers whose "
                "outputs the drafter was trained on",
                where="config.json:dflash_config.target_layer_ids",
            )
        h = config.hidden_size
        self.layers = nn.ModuleList(DraftLayer(config, i) for i in range(config.num_hidden_layers))
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, config.rms_norm_eps)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
        self.rotary_emb = RotaryEmbedding(head_dim, rope_theta(config))
        # DSpark heads, from the top-level keys as sglang's model builder reads them (load_drafter
        # hoists every other spelling there first, as SpecForge's export normaliser does)
        rank = int(getattr(config, "markov_rank", None) or 0)
        head_type = str(getattr(config, "markov_head_type", None) or "vanilla").lower()
        self.markov_head: VanillaMarkov | None = (
            build_markov_head(head_type, vocab_size=config.vocab_size, markov_rank=rank, hidden_size=h)
            if rank > 0
            else None
        )
        self.confidence_head: ConfidenceHead | None = (
            ConfidenceHead(
                hidden_size=h,
                markov_rank=rank,
                with_markov=bool(getattr(config, "confidence_head_with_markov", False)),
            )
            if getattr(config, "enable_confidence_head", False)
            else None
        )

    def new_cache(self) -> DraftCache:
        """An empty context cache sized for this model."""
        return DraftCache(len(self.layers))

    def describe(self) -> dict[str, Any]:
        """The drafter's summary: geometry inputs and its DSpark heads (``None`` where absent)."""
        return {
            "architecture": (list(getattr(self.config, "architectures", None) or []) or [None])[0],
            "block_size": self.block_size,
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
            **describe_heads(self.markov_head, self.confidence_head),
        }

    def extract_context_feature(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """HF ``output_hidden_states`` tuple -> ``[B, S, K*H]`` (layer l's OUTPUT = hidden_states[l+1])."""
        return torch.cat([hidden_states[i + 1] for i in self.target_layer_ids], dim=-1)

    def forward(
        self,
        noise_embedding: torch.Tensor,
        target_hidden: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DraftCache | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Draft one block: ``[B, q, H]`` rows after the final norm.

        ``noise_embedding``: target input embeddings of ``[anchor, MASK x (q-1)]``;
        ``target_hidden``: ``[B, c, K*H]`` features of the NEW committed context positions (c may be 0);
        ``position_ids``: ``[B, c + q]``, positions of those c rows and then of the q block rows.
        The c new context K/V are appended to ``cache`` when one is given. ``attention_mask``
        (boolean, True = may attend, ``[B, 1, q, cached + c + q]``) is only needed when training packs
        several blocks into one call.
        """
        c = target_hidden.shape[1]
        dtype = noise_embedding.dtype
        inputs = LayerInputs(
            context=self.hidden_norm(self.fc(target_hidden)),
            rope_ctx=self.rotary_emb(position_ids[:, :c], dtype),
            rope_blk=self.rotary_emb(position_ids[:, c:], dtype),
            cache=cache,
            attention_mask=attention_mask,
        )
        x = noise_embedding
        for layer in self.layers:
            x = layer(x, inputs)
        return self.norm(x)


def _as_config(config: Mapping[str, Any]) -> Any:
    from transformers import Qwen3Config

    cfg = dict(config)
    cfg.pop("architectures", None)
    cfg.pop("model_type", None)
    out = Qwen3Config(**cfg)
    out.architectures = list(config.get("architectures") or ["DFlashDraftModel"])
    return out


def _config_arguments(config: Mapping[str, Any]) -> dict[str, Any]:
    """Block size, mask token id and target layer ids as a config dict gives them (``dflash_config``)."""
    dcfg = dict(config.get("dflash_config") or {})
    block_size = dcfg.get("block_size") or config.get("block_size")
    if block_size is None:
        raise MissingBlockSizeError(
            "block_size is missing; set it (or dflash_config.block_size) to the drafter's block width",
            where="config.json:block_size",
        )
    if dcfg.get("mask_token_id") is None:
        raise InvalidCheckpointError(
            "dflash_config.mask_token_id is missing; set it to the token the drafter's MASK rows carry",
            where="config.json:dflash_config.mask_token_id",
        )
    return {
        "block_size": block_size,
        "mask_token_id": dcfg["mask_token_id"],
        "target_layer_ids": dcfg.get("target_layer_ids") or [],
    }


def new_draft_model(config: Mapping[str, Any], *, seed: int | None = None) -> DFlashDraftModel:
    """A randomly initialised drafter from a config dict (HF Qwen3 keys + block_size + dflash_config)."""
    if seed is not None:
        torch.manual_seed(seed)
    model = DFlashDraftModel(_as_config(config), **_config_arguments(config))
    std = float(config.get("initializer_range", 0.02))
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):  # Embedding: a Markov head's markov_w1
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    return model


def _checkpoint_arguments(cfg: DflashCfg, mask_token_id: int | None, where: str) -> dict[str, Any]:
    """Block size, mask token id and target layer ids from the census (``mask_token_id`` when it has none)."""
    if cfg.block_size is None:
        raise MissingBlockSizeError(
            f"{where} gives no block size, and the drafter needs it to draft; add block_size, the width "
            "the drafter was trained with, to config.json.",
            where=where,
        )
    mask = cfg.mask_token_id if cfg.mask_token_id is not None else mask_token_id
    if mask is None:
        raise InvalidCheckpointError(
            f"{where}: no mask_token_id; set dflash_config.mask_token_id to the id the drafter was trained "
            "with, or pass the target tokenizer's <|MASK|> id as mask_token_id (sglang's rule).",
            where=where,
        )
    return {
        "block_size": cfg.block_size,
        "mask_token_id": mask,
        "target_layer_ids": cfg.target_layer_ids or (),
    }


def _built(build: Any, folder: Path) -> DFlashDraftModel:
    try:
        model: DFlashDraftModel = build()
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        if isinstance(exc, InvalidCheckpointError):
            raise
        raise InvalidCheckpointError(
            f"{folder / 'config.json'}: cannot build the drafter from this config ({exc}); it needs the "
            "Qwen3 keys hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
            "num_key_value_heads, rms_norm_eps",
            where=str(folder / "config.json"),
        ) from exc
    return model


def _shapes(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in tensors.items()}


def load_drafter(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    cfg: DflashCfg | None = None,
    mask_token_id: int | None = None,
) -> DFlashDraftModel:
    """Load a z-lab or SpecForge format drafter (config.json + model.safetensors), DSpark heads included.

    The config is read through the checkpoint census (pass ``cfg`` when the caller has already taken
    it); ``mask_token_id`` is drafted with when the checkpoint names none. The weight names are checked
    strictly: missing or unexpected keys raise ``InvalidCheckpointError`` listing them. A Markov head
    takes its rank from the census (or from ``markov_w1`` when the config names none) and its type from
    ``markov_head_type`` in any spelling sglang or SpecForge writes; a confidence head is loaded when
    the weights hold one, with or without the Markov features as its width says.
    """
    if cfg is None:
        from ..census import census

        cfg = census(str(path))
    folder = Path(cfg.path)
    where = printable(folder / "config.json")
    # the headers' shapes first, under the engine's names: every check runs before a tensor is read
    fmt = export_format(cfg)
    shapes = fmt.to_engine(header_shapes(folder), folder)
    config = engine_config(cfg, fmt)
    raw = {**config, **head_keys(folder, config, cfg, shapes)}
    check_model_settings(raw, where)
    arguments = {
        **_checkpoint_arguments(cfg, mask_token_id, where),
        "target_layer_ids": engine_layer_ids(cfg, fmt),
    }

    def build() -> DFlashDraftModel:
        return DFlashDraftModel(_as_config(raw), **arguments)

    expected = check_sizes_before_allocating(build, raw, shapes, where)
    check_state_fits(expected, shapes, folder, raw["markov_head_type"], fmt)  # names, before allocating
    state = fmt.to_engine(read_state_dict(folder), folder)
    model = _built(build, folder)
    check_state_fits(_shapes(model.state_dict()), _shapes(state), folder, raw["markov_head_type"], fmt)
    model.load_state_dict(state, strict=True)
    return model.to(device=device, dtype=dtype).eval()


__all__ = ["DraftCache", "DFlashDraftModel", "new_draft_model", "load_drafter"]
