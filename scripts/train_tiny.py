#!/usr/bin/env python
"""Train the embedded tiny target and its tiny drafters on text available offline.

Steps (all seeded, CPU, reproducible for a given torch build and thread count):
  a. text: a fixed, sorted subset of the running interpreter's standard-library sources;
  b. a byte-level BPE tokenizer (with a ``<|MASK|>`` special token) saved as a transformers fast tokenizer;
  c. a small ``Qwen3ForCausalLM`` target trained as a causal LM;
  d. drafter data: the target's own greedy continuations of prompts cut from the text;
  e. four 1-layer drafters on the same target features, in this order: DFlash objective (row k ->
     token at anchor+k, anchor row not in the loss), DSpark objective (row k -> token at anchor+k+1,
     all rows, CE only), a SpecForge-shaped DSpark drafter (``drafter-dspark-markov``: block 7, a
     vanilla Markov head and a confidence head, SpecForge's 0.1 CE + 0.9 L1 + 1.0 BCE objective), and
     the same architecture and heads trained mask-fill (``drafter-dspark-maskfill``: block 8, declared
     ``sample_from_anchor: false``, row k -> token at anchor+k, the Markov chain starting at the anchor);
  f. export: target with ``save_pretrained`` (float16), drafters in SpecForge format
     (config.json + model.safetensors, float16; the Markov drafter in SpecForge's sglang-normalised
     spelling), prompts.json and training_report.json.

Default sizes take about 25 minutes on 2 CPU cores; ``--help`` lists the knobs a tiny smoke run uses.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "sglang_dspark_plugin" / "embedded"
EOS, MASK = "<|endoftext|>", "<|MASK|>"
# Every HELD_OUT_EVERY-th stdlib file is kept out of training and feeds the fixed prompt list.
HELD_OUT_EVERY = 8
# Trained in this order; a drafter left out of --drafters has its random draws replayed instead.
DRAFTERS = ("dflash", "dspark", "dspark-markov", "dspark-maskfill")
# The drafters with a Markov and a confidence head, and the objective each is trained with.
MARKOV_DRAFTERS = {"dspark-markov": "dspark", "dspark-maskfill": "dflash"}
# SpecForge's default DSpark objective (specforge/config/schema.py): CE, L1 and confidence weights.
CE_ALPHA, L1_ALPHA, CONFIDENCE_ALPHA = 0.1, 0.9, 1.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: the package)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is robust on a shared CPU)")
    p.add_argument("--files", type=int, default=0, help="use only the first N training files (0 = all)")
    p.add_argument("--max-chars", type=int, default=3_000_000, help="cap on training text size")
    p.add_argument("--vocab", type=int, default=1536)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--seq", type=int, default=128, help="target training sequence length")
    p.add_argument("--target-steps", type=int, default=600)
    p.add_argument("--target-batch", type=int, default=16)
    p.add_argument("--target-lr", type=float, default=3e-3)
    p.add_argument("--gen-seqs", type=int, default=1536, help="greedy continuations for drafter data")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=96)
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument(
        "--target-layer-ids",
        type=str,
        default="",
        help="comma list; default 1, layers//2, layers-2 (sglang cannot capture the last layer)",
    )
    p.add_argument("--draft-steps", type=int, default=1800)
    p.add_argument("--draft-batch", type=int, default=16)
    p.add_argument("--anchors", type=int, default=16, help="blocks per sequence per step")
    p.add_argument("--draft-lr", type=float, default=2e-3)
    p.add_argument("--loss-decay", type=float, default=4.0, help="weight exp(-(j-1)/gamma) of draft j")
    p.add_argument(
        "--drafters",
        type=str,
        default=",".join(DRAFTERS),
        help=f"comma list of drafters to train (default: all of {', '.join(DRAFTERS)}); the "
        "random draws of the others are replayed, so each equals the one of a full run",
    )
    p.add_argument(
        "--markov-block-size",
        type=int,
        default=7,
        help="block size of drafter-dspark-markov (SpecForge's DSpark configs use 7); "
        "drafter-dspark-maskfill uses --block-size (7 drafts either way)",
    )
    p.add_argument(
        "--markov-rank",
        type=int,
        default=4,
        help="rank of its vanilla Markov head (4: for a 1536-token vocabulary a bigram head "
        "weak enough that the wrong harvest still collapses, as with real checkpoints; at "
        "rank 32 the wrong harvest kept 2.94 vs 4.17)",
    )
    p.add_argument(
        "--markov-loss-decay",
        type=float,
        default=4.0,
        help="its weight exp(-k/gamma) of row k (SpecForge's DSpark recipes: gamma 4)",
    )
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--reuse-target",
        action="store_true",
        help="load the target and tokenizer already in --out instead of training them; the random "
        "draws of steps b-c are replayed, so the drafters equal those of a full run",
    )
    args = p.parse_args(argv)
    args.drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    unknown = sorted(set(args.drafters) - set(DRAFTERS))
    if unknown or not args.drafters:
        p.error(f"--drafters: unknown {unknown or 'empty list'}; choose from {', '.join(DRAFTERS)}")
    return args


def servable_layer_ids(num_layers: int) -> list[int]:
    """Default target layers: spread over the target, never the last one.

    sglang captures layer i's output as the input of layer i+1, so the last layer's output cannot be
    captured (a drafter that reads it fails at the first served decode round).
    """
    return sorted({1, num_layers // 2, num_layers - 2})


# ---------------------------------------------------------------- a. text
def stdlib_files() -> list[Path]:
    """The interpreter's own top-level stdlib sources, sorted (offline, identical on every run)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(f for f in root.glob("*.py") if f.is_file())


def load_texts(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    files = stdlib_files()
    train = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY]
    held = [f for i, f in enumerate(files) if not i % HELD_OUT_EVERY]
    if args.files:
        train = train[: args.files]
    texts, total = [], 0
    for f in train:
        t = f.read_text(encoding="utf-8", errors="replace")
        texts.append(t)
        total += len(t)
        if total >= args.max_chars:
            break
    return texts, [f.read_text(encoding="utf-8", errors="replace") for f in held]


# ---------------------------------------------------------------- b. tokenizer
def train_tokenizer(texts: list[str], vocab: int, out: Path) -> Any:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        texts, vocab_size=vocab, min_frequency=2, special_tokens=[EOS, MASK], show_progress=False
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=EOS,
        additional_special_tokens=[MASK],
    )
    tok.save_pretrained(str(out))
    return tok


def token_stream(tok: Any, texts: list[str]) -> torch.Tensor:
    eos = tok.convert_tokens_to_ids(EOS)
    ids: list[int] = []
    for t in texts:
        ids.extend(tok(t, add_special_tokens=False)["input_ids"])
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- c. target
def target_config(args: argparse.Namespace, vocab: int, eos: int) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        use_cache=True,
    )


def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def train_target(
    args: argparse.Namespace, stream: torch.Tensor, cfg: Any, gen: torch.Generator, bar: bool
) -> tuple[Any, list[float]]:
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.target_lr, weight_decay=0.1, betas=(0.9, 0.95))
    n_start = len(stream) - args.seq - 1
    losses: list[float] = []
    for step in tqdm(range(args.target_steps), desc="target LM", disable=not bar):
        starts = torch.randint(0, n_start, (args.target_batch,), generator=gen)
        x = torch.stack([stream[s : s + args.seq] for s in starts.tolist()])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.target_steps, args.target_lr)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    # Round to the shipped 16-bit weights now, so the drafter data is what the shipped target says.
    model = model.half().float().eval()
    return model, losses


def load_trained_target(out: Path, args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    """``--reuse-target``: the target, tokenizer and target report a full run wrote to ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, report_path = out / "target", out / "training_report.json"
    if not (folder / "config.json").is_file() or not report_path.is_file():
        raise SystemExit(f"--reuse-target: {folder} or {report_path} is missing; run without it first")
    report = json.loads(report_path.read_text())["target"]
    if (report.get("steps"), report.get("batch")) != (args.target_steps, args.target_batch):
        raise SystemExit("--reuse-target: the target in --out was trained with other --target-steps/-batch")
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    target = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    return target.eval(), tok, report


def replay_target_draws(args: argparse.Namespace, stream: torch.Tensor, gen: torch.Generator) -> None:
    """Advance ``gen`` exactly as ``train_target`` does (one batch of start offsets per step)."""
    n_start = len(stream) - args.seq - 1
    for _ in range(args.target_steps):
        torch.randint(0, n_start, (args.target_batch,), generator=gen)


# ---------------------------------------------------------------- d. drafter data
@torch.no_grad()
def greedy_continuations(
    target: Any, prompts: torch.Tensor, gen_len: int, batch: int, bar: bool
) -> torch.Tensor:
    """``[N, P + gen_len]``: each prompt followed by the target's own greedy continuation."""
    # transformers renamed `past_key_values` to `cache`; use whichever this version speaks.
    new_api = "cache" in inspect.signature(target.forward).parameters
    cache_arg = cache_out = "cache" if new_api else "past_key_values"
    out = []
    for i in tqdm(range(0, len(prompts), batch), desc="greedy data", disable=not bar):
        x = prompts[i : i + batch]
        res = target(input_ids=x, use_cache=True)
        past, nxt = getattr(res, cache_out), res.logits[:, -1].argmax(-1, keepdim=True)
        seq = [x, nxt]
        for _ in range(gen_len - 1):
            res = target(input_ids=nxt, use_cache=True, **{cache_arg: past})
            past, nxt = getattr(res, cache_out), res.logits[:, -1].argmax(-1, keepdim=True)
            seq.append(nxt)
        out.append(torch.cat(seq, dim=1))
    return torch.cat(out)


@torch.no_grad()
def context_features(target: Any, seqs: torch.Tensor, layer_ids: list[int], batch: int) -> torch.Tensor:
    """Target features of every position (layer l's output = hidden_states[l+1]), stored in float16."""
    feats = []
    for i in range(0, len(seqs), batch):
        hs = target(input_ids=seqs[i : i + batch], output_hidden_states=True).hidden_states
        feats.append(torch.cat([hs[i + 1] for i in layer_ids], dim=-1).half())
    return torch.cat(feats)


@torch.no_grad()
def target_last_hidden(target: Any, seqs: torch.Tensor, batch: int) -> torch.Tensor:
    """The target's final (normed) hidden state at every position, float16: lm_head of it is its logits."""
    out = []
    for i in range(0, len(seqs), batch):
        out.append(target(input_ids=seqs[i : i + batch], output_hidden_states=True).hidden_states[-1].half())
    return torch.cat(out)


# ---------------------------------------------------------------- e. drafters
def drafter_config(
    args: argparse.Namespace, tcfg: Any, mask_id: int, layer_ids: list[int], strategy: str
) -> dict[str, Any]:
    dflash_config: dict[str, Any] = {"mask_token_id": mask_id, "target_layer_ids": layer_ids}
    if strategy == "dspark":
        # What SpecForge's DSparkDraftModel constructor forces; markov_rank 0 = no Markov head.
        dflash_config.update(projector_type="dspark", attention_mode="gqa", markov_rank=0)
    return {
        "architectures": ["DSparkDraftModel" if strategy == "dspark" else "DFlashDraftModel"],
        "model_type": "qwen3",
        "block_size": args.block_size,
        "num_target_layers": tcfg.num_hidden_layers,
        "num_hidden_layers": 1,
        "layer_types": ["full_attention"],
        "dflash_config": dflash_config,
        "vocab_size": tcfg.vocab_size,
        "draft_vocab_size": tcfg.vocab_size,
        "hidden_size": tcfg.hidden_size,
        "intermediate_size": tcfg.intermediate_size,
        "num_attention_heads": tcfg.num_attention_heads,
        "num_key_value_heads": tcfg.num_key_value_heads,
        "head_dim": tcfg.head_dim,
        "rms_norm_eps": tcfg.rms_norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "max_position_embeddings": tcfg.max_position_embeddings,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "rope_theta": 10000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "dtype": "float16",
        "use_cache": True,
    }


def block_batch(
    seqs: torch.Tensor,
    first_anchor: int,
    b: int,
    n_anchors: int,
    strategy: str,
    mask_id: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, ...]:
    """Sample anchors per sequence; return block ids, positions, labels, loss weights and the mask.

    Block j (anchor a_j) sees context positions < a_j (its own anchor's features do not exist at
    inference time) plus every row of its own block, and nothing of the other blocks.
    """
    n, s = seqs.shape
    last = s - 2  # the anchor needs at least one label inside the sequence
    cands = torch.arange(first_anchor, last + 1)
    k = min(n_anchors, len(cands))
    anchors = torch.stack(
        [cands[torch.randperm(len(cands), generator=gen)[:k]].sort().values for _ in range(n)]
    )
    rows = torch.arange(b)
    pos = anchors[:, :, None] + rows  # [n, k, b]
    offset = 1 if strategy == "dspark" else 0  # row r is trained for anchor + r + offset
    label_pos = pos + offset
    valid = label_pos < s
    labels = torch.gather(seqs, 1, label_pos.clamp(max=s - 1).view(n, -1)).view(n, k, b)
    if strategy == "dflash":
        valid[:, :, 0] = False  # the anchor row is not trained under mask-fill
    ids = torch.full((n, k, b), mask_id, dtype=torch.long)
    ids[:, :, 0] = torch.gather(seqs, 1, anchors)
    ctx_ok = torch.arange(s)[None, None, :] < anchors[:, :, None]  # [n, k, s]
    same_block = torch.eye(k, dtype=torch.bool)[:, :, None, None].expand(k, k, b, b)
    blk_ok = same_block.permute(0, 2, 1, 3).reshape(k * b, k * b)
    mask = torch.cat(
        [ctx_ok[:, :, None, :].expand(n, k, b, s).reshape(n, k * b, s), blk_ok.expand(n, -1, -1)], dim=-1
    )[:, None]
    return ids.view(n, -1), pos.view(n, -1), labels.view(n, -1), valid.view(n, -1), mask


def draft_step(opt: torch.optim.Optimizer, draft: Any, loss: torch.Tensor, lr: float) -> float:
    """One optimiser step of a drafter at learning rate ``lr`` (clipped at norm 1); the loss value."""
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def train_drafter(
    args: argparse.Namespace,
    strategy: str,
    cfg: dict[str, Any],
    target: Any,
    seqs: torch.Tensor,
    feats: torch.Tensor,
    gen: torch.Generator,
    bar: bool,
) -> tuple[Any, list[float]]:
    from sglang_dspark_plugin.engine.drafter import new_draft_model

    b, mask_id = args.block_size, cfg["dflash_config"]["mask_token_id"]
    draft = new_draft_model(cfg, seed=args.seed).float().train()
    embed, lm_head = target.get_input_embeddings(), target.lm_head
    # Draft j (1-based) is the j-th harvested row; its loss weight decays with j like SpecForge's.
    row_draft = torch.arange(b) + (0 if strategy == "dflash" else 1)
    row_w = torch.exp(-(row_draft - 1).clamp(min=0).float() / args.loss_decay)
    opt = torch.optim.AdamW(draft.parameters(), lr=args.draft_lr, weight_decay=0.0)
    s = seqs.shape[1]
    ctx_pos = torch.arange(s)
    losses: list[float] = []
    for step in tqdm(range(args.draft_steps), desc=f"drafter {strategy}", disable=not bar):
        pick = torch.randint(0, len(seqs), (args.draft_batch,), generator=gen)
        x = seqs[pick]
        ids, pos, labels, valid, mask = block_batch(
            x, args.prompt_len - 1, b, args.anchors, strategy, mask_id, gen
        )
        with torch.no_grad():
            noise = embed(ids)
        position_ids = torch.cat([ctx_pos.expand(len(x), -1), pos], dim=1)
        hidden = draft(noise, feats[pick].float(), position_ids, attention_mask=mask)
        logits = lm_head(hidden)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
        w = row_w.repeat(ids.shape[1] // b)[None].expand_as(valid) * valid
        loss = (ce * w.reshape(-1)).sum() / w.sum().clamp(min=1e-6)
        losses.append(draft_step(opt, draft, loss, lr_at(step, args.draft_steps, args.draft_lr)))
    return draft.eval(), losses


def replay_drafter_draws(args: argparse.Namespace, seqs: torch.Tensor, gen: torch.Generator) -> None:
    """Advance ``gen`` exactly as one drafter's training does: per step, the batch pick and then one
    anchor permutation per sequence (``block_batch``; neither depends on the block size)."""
    n_candidates = seqs.shape[1] - 2 - (args.prompt_len - 1) + 1
    for _ in range(args.draft_steps):
        torch.randint(0, len(seqs), (args.draft_batch,), generator=gen)
        for _ in range(args.draft_batch):
            torch.randperm(n_candidates, generator=gen)


def markov_drafter_config(
    args: argparse.Namespace, tcfg: Any, mask_id: int, layer_ids: list[int], strategy: str = "dspark"
) -> dict:
    """SpecForge's DSpark config (Markov keys in dflash_config), normalised for sglang the way
    SpecForge's ``normalize_dflash_export.py`` does it: the keys hoisted to the top level and the
    architecture ``Qwen3DSparkModel``, a class both sglang 0.5.17 and 0.5.23 register.

    ``strategy="dflash"``: the same drafter trained mask-fill, declared the way sglang 0.5.23 reads it
    (top-level ``sample_from_anchor: false``), at ``--block-size``."""
    cfg = drafter_config(args, tcfg, mask_id, layer_ids, "dspark")
    heads = {
        "markov_rank": args.markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
    }
    cfg["dflash_config"].update(heads, confidence_head_alpha=CONFIDENCE_ALPHA)
    cfg.update(heads, architectures=["Qwen3DSparkModel"], block_size=args.markov_block_size)
    if strategy == "dflash":
        cfg.update(block_size=args.block_size, sample_from_anchor=False)
    return cfg


def markov_logits(head: Any, base: torch.Tensor, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """Teacher-forced Markov logits of blocks of ``prev.shape[-1]`` rows: row k's bias comes from the
    ground-truth token before its label (the anchor for the first drafted row), through the same
    ``step_bias`` the engine drafts with, the recurrence (rnn) running inside each block as at inference.

    ``base`` ``[n, rows, V]``, ``hidden`` ``[n, rows, H]``, ``prev`` ``[n, blocks, b]``.
    """
    b = prev.shape[-1]
    base_b, hid_b = base.reshape(-1, b, base.shape[-1]), hidden.reshape(-1, b, hidden.shape[-1])
    prev_b = prev.reshape(-1, b)
    state = head.init_state(hid_b[:, 0])
    rows = []
    for k in range(b):
        bias, state = head.step_bias(prev_b[:, k], hid_b[:, k], state)
        rows.append(base_b[:, k] + bias)
    return torch.stack(rows, dim=1).reshape(base.shape)


def dspark_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    teacher: torch.Tensor,
    confidence: torch.Tensor,
    weights: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SpecForge's ``OnlineDSparkModel`` objective, token-pooled over the weighted rows.

    CE against the labels; L1 between the draft's and the target's next-token distributions; BCE of
    the confidence logit against the acceptance probability ``1 - L1 / 2`` (detached), the chance that
    speculative sampling keeps the draft. All ``[..., V]`` / ``[...]`` tensors, ``weights`` 0 off-label.
    """
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    l1 = (torch.softmax(logits.float(), -1) - teacher).abs().sum(-1).reshape(-1)
    accept = (1.0 - 0.5 * l1).clamp(0.0, 1.0).detach()
    bce = F.binary_cross_entropy_with_logits(confidence.float().reshape(-1), accept, reduction="none")
    w = weights.reshape(-1)
    den = w.sum().clamp(min=1e-6)
    parts = {"ce": (ce * w).sum() / den, "l1": (l1 * w).sum() / den, "confidence_bce": (bce * w).sum() / den}
    loss = CE_ALPHA * parts["ce"] + L1_ALPHA * parts["l1"] + CONFIDENCE_ALPHA * parts["confidence_bce"]
    return loss, {k: float(v.detach()) for k, v in parts.items()}


def train_markov_drafter(
    args: argparse.Namespace,
    cfg: dict[str, Any],
    target: Any,
    seqs: torch.Tensor,
    feats: torch.Tensor,
    last_hidden: torch.Tensor,
    gen: torch.Generator,
    bar: bool,
    strategy: str = "dspark",
) -> tuple[Any, list[float], list[dict[str, float]]]:
    """A DSpark-architecture drafter with a Markov and a confidence head, SpecForge's objective.

    ``strategy="dspark"`` (shifted): row k learns anchor+k+1, all rows. ``"dflash"`` (mask-fill): row k
    learns anchor+k, the anchor row out of the loss. Either way the Markov bias of a row comes from the
    token before its label, the anchor for the first draft.
    """
    from sglang_dspark_plugin.engine.drafter import new_draft_model

    b, mask_id = cfg["block_size"], cfg["dflash_config"]["mask_token_id"]
    draft = new_draft_model(cfg, seed=args.seed).float().train()
    embed, lm_head = target.get_input_embeddings(), target.lm_head
    offset = 1 if strategy == "dspark" else 0  # row k's label is anchor + k + offset
    # SpecForge: weight exp(-(j-1) / gamma) of draft j; draft j is row j-1 (shifted) or row j (mask-fill)
    row_w = torch.exp(-(torch.arange(b) - 1 + offset).clamp(min=0).float() / args.markov_loss_decay)
    opt = torch.optim.AdamW(draft.parameters(), lr=args.draft_lr, weight_decay=0.0)
    s = seqs.shape[1]
    ctx_pos = torch.arange(s)
    losses: list[float] = []
    parts: list[dict[str, float]] = []
    for step in tqdm(range(args.draft_steps), desc=f"drafter {strategy} + Markov", disable=not bar):
        pick = torch.randint(0, len(seqs), (args.draft_batch,), generator=gen)
        x = seqs[pick]
        ids, pos, labels, valid, mask = block_batch(
            x, args.prompt_len - 1, b, args.anchors, strategy, mask_id, gen
        )
        n = len(x)
        with torch.no_grad():
            noise = embed(ids)
            # the target's distribution over each label: its logits at the position before the label
            at = (pos + offset - 1).clamp(max=s - 1)[..., None].expand(-1, -1, last_hidden.shape[-1])
            teacher = torch.softmax(lm_head(torch.gather(last_hidden[pick], 1, at).float()).float(), -1)
        position_ids = torch.cat([ctx_pos.expand(n, -1), pos], dim=1)
        hidden = draft(noise, feats[pick].float(), position_ids, attention_mask=mask)
        blocks = labels.view(n, -1, b)
        # the token before each row's label: the anchor, then the labels (mask-fill: row 0 is out of the
        # loss, and row 1's label follows the anchor, which is row 0's label)
        prev = torch.cat([ids.view(n, -1, b)[..., :1], blocks[..., :-1]], dim=-1)
        logits = markov_logits(draft.markov_head, lm_head(hidden), hidden, prev)
        confidence = draft.confidence_head(hidden, draft.markov_head.get_prev_embeddings(prev.reshape(n, -1)))
        w = row_w.repeat(ids.shape[1] // b)[None].expand_as(valid) * valid
        loss, part = dspark_loss(logits, labels, teacher, confidence, w)
        losses.append(draft_step(opt, draft, loss, lr_at(step, args.draft_steps, args.draft_lr)))
        parts.append(part)
    return draft.eval(), losses, parts


# ---------------------------------------------------------------- f. export
def export_drafter(draft: Any, cfg: dict[str, Any], folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in draft.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def pick_prompts(tok: Any, held: list[str], n: int, n_tokens: int) -> list[str]:
    """Fixed prompts: the opening lines of held-out stdlib files after their docstrings."""
    prompts = []
    for text in held:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        body = "\n".join(lines[len(lines) // 3 :])  # skip licence headers and module docstrings
        ids = tok(body, add_special_tokens=False)["input_ids"][:n_tokens]
        if len(ids) == n_tokens:
            prompts.append(tok.decode(ids))
        if len(prompts) == n:
            break
    return prompts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    bar = not args.quiet
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    texts, held = load_texts(args)
    if args.reuse_target:
        target, tok, target_report = load_trained_target(out, args)
        stream = token_stream(tok, texts)
        replay_target_draws(args, stream, gen)
    else:
        tok = train_tokenizer(texts, args.vocab, out / "target")
        stream = token_stream(tok, texts)
    eos, mask_id = tok.convert_tokens_to_ids(EOS), tok.convert_tokens_to_ids(MASK)
    timings["tokenizer_s"] = time.time() - t0

    tcfg = target_config(args, len(tok), eos)
    if not args.reuse_target:
        t = time.time()
        target, target_losses = train_target(args, stream, tcfg, gen, bar)
        timings["target_s"] = time.time() - t
        target.half().save_pretrained(str(out / "target"))
        target.float()
        target_report = {
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "intermediate": args.intermediate,
            "seq": args.seq,
            "steps": args.target_steps,
            "batch": args.target_batch,
            "loss_first": target_losses[0],
            "loss_last_50": sum(target_losses[-50:]) / len(target_losses[-50:]),
            "parameters": sum(p.numel() for p in target.parameters()),
        }
    for p in target.parameters():
        p.requires_grad_(False)

    t = time.time()
    starts = torch.randint(0, len(stream) - args.prompt_len, (args.gen_seqs,), generator=gen)
    prompts = torch.stack([stream[s : s + args.prompt_len] for s in starts.tolist()])
    seqs = greedy_continuations(target, prompts, args.gen_len, 64, bar)
    layer_ids = (
        [int(x) for x in args.target_layer_ids.split(",")]
        if args.target_layer_ids
        else servable_layer_ids(args.layers)
    )
    feats = context_features(target, seqs, layer_ids, 64)
    with_markov = any(name in args.drafters for name in MARKOV_DRAFTERS)
    last_hidden = target_last_hidden(target, seqs, 64) if with_markov else None
    timings["data_s"] = time.time() - t

    report_drafters = {}
    for name in DRAFTERS:  # the order fixes the random draws each drafter sees
        if name not in args.drafters:
            replay_drafter_draws(args, seqs, gen)
            continue
        t = time.time()
        if name in MARKOV_DRAFTERS:
            strategy = MARKOV_DRAFTERS[name]
            cfg = markov_drafter_config(args, tcfg, mask_id, layer_ids, strategy)
            draft, losses, parts = train_markov_drafter(
                args, cfg, target, seqs, feats, last_hidden, gen, bar, strategy
            )
        else:
            cfg = drafter_config(args, tcfg, mask_id, layer_ids, name)
            draft, losses = train_drafter(args, name, cfg, target, seqs, feats, gen, bar)
            parts = []
        export_drafter(draft, cfg, out / f"drafter-{name}")
        timings[f"drafter_{name}_s"] = time.time() - t
        report_drafters[name] = {
            "architecture": cfg["architectures"][0],
            "block_size": cfg["block_size"],
            "steps": args.draft_steps,
            "loss_first": losses[0],
            "loss_last_50": sum(losses[-50:]) / len(losses[-50:]),
            "parameters": sum(p.numel() for p in draft.parameters()),
        }
        if parts:
            report_drafters[name]["markov_rank"] = cfg["markov_rank"]
            report_drafters[name]["loss_parts_last_50"] = {
                k: sum(p[k] for p in parts[-50:]) / len(parts[-50:]) for k in parts[0]
            }
    if args.reuse_target and (out / "training_report.json").is_file():
        # the target is the one those drafters were trained on: keep the entries of drafters not retrained
        previous = json.loads((out / "training_report.json").read_text()).get("drafters", {})
        kept = [k for k in DRAFTERS if k in report_drafters or k in previous]
        report_drafters = {k: report_drafters.get(k, previous.get(k)) for k in kept}

    (out / "prompts.json").write_text(
        json.dumps(pick_prompts(tok, held, args.n_prompts, args.prompt_len), indent=2) + "\n"
    )
    timings["total_s"] = time.time() - t0
    report = {
        "seed": args.seed,
        "threads": args.threads,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "text": {"files": len(texts), "chars": sum(map(len, texts)), "tokens": len(stream)},
        "tokenizer": {"vocab": len(tok), "mask_token_id": mask_id, "eos_token_id": eos},
        "target": target_report,
        "drafter_data": {"sequences": args.gen_seqs, "prompt_len": args.prompt_len, "gen_len": args.gen_len},
        "block_size": args.block_size,
        "target_layer_ids": layer_ids,
        "drafters": report_drafters,
        "target_reused": bool(args.reuse_target),
        "wall_time_s": {k: round(v, 1) for k, v in timings.items()},
    }
    (out / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps(
            {
                "out": str(out),
                "wall_time_s": report["wall_time_s"],
                "target_loss": report["target"]["loss_last_50"],
                "drafter_loss": {k: v["loss_last_50"] for k, v in report_drafters.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
