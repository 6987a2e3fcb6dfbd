"""What the serving plan must decide for every fixture checkpoint, per sglang release and harvest
override: served as which builtin under which harvest, or refused with which kind, at which key.

The launch is the fixture as ``--speculative-draft-model-path`` with ``PLAN_TARGET_CONFIG`` as the
target (a tiny Qwen3 whose 40 layers let sglang capture every layer id the fixtures name). Each row
gives, per release, the outcome with ``MEMRA_DSPARK_HARVEST`` unset, ``dflash`` and ``dspark``. A
refusal's ``where`` is given relative to the fixture's folder ("" is the folder itself).

``tests/serving/test_serving_plan.py`` compares ``make_plan`` with this table, so a plan that refused a
servable fixture fails as surely as one that served a refused one; ``tests/sglang/test_server_args.py``
compares sglang's real argument pipeline and ``inspect``'s per-release verdict with it.
"""

from __future__ import annotations

PLAN_TARGET_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "num_hidden_layers": 40,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}
"""The target of every planned launch: prepare_server_args and the plan read only its config.json."""

RELEASES = ("0.5.17", "0.5.23")
ENVS = (None, "dflash", "dspark")
"""The columns of each row: ``MEMRA_DSPARK_HARVEST`` unset, then each override."""

D = "DFLASH dflash"  # served as DFLASH, rows 1..b-1
S = "DSPARK dspark"  # served as DSPARK anchor-first, rows 0..b-1
MF = "DSPARK mask-fill dflash"  # served as DSPARK with sample_from_anchor=false, rows 1..b-1

Row = tuple[str, str, str]


def refused(kind: str, where: str) -> str:
    """A refusal of ``kind`` naming ``where`` (relative to the fixture's folder)."""
    return f"refused {kind} at {where}"


def both(*row: str) -> dict[str, Row]:
    """The same outcomes on every release."""
    assert len(row) == len(ENVS)
    return dict.fromkeys(RELEASES, row)  # type: ignore[arg-type]


def always(outcome: str) -> dict[str, Row]:
    """One outcome on every release, whatever the override (the census refuses first)."""
    return both(outcome, outcome, outcome)


ARCH = "config.json: architectures"

EXPECTED: dict[str, dict[str, Row]] = {
    "block_size_one": always(refused("invalid", "config.json:block_size")),
    "block_sizes_disagree": always(refused("invalid", "config.json:block_size")),
    "conflicting_flags": both(refused("conflict", ""), D, S),
    "conflicting_structure": both(refused("conflict", ""), D, S),
    "deepseek_v4_inference": always(refused("unsupported", "target_layer_ids")),
    "deepseek_v4_plain_mtp": always(refused("unsupported", "config.json:n_mtp_layers")),
    "deepseek_v4_stages_only": both(
        refused("invalid", "--speculative-dspark-block-size"),
        refused("invalid", "--speculative-dflash-block-size"),
        refused("invalid", "--speculative-dspark-block-size"),
    ),
    "deepspec_training_state": both(S, D, S),
    "dflash2": {
        "0.5.17": (refused("unsupported", ARCH), refused("unsupported", ARCH), refused("unsupported", ARCH)),
        "0.5.23": (D, D, refused("unsupported", ARCH)),
    },
    "dflash_shift_label": both(D, D, S),
    "domino_shift_false": always(refused("unsupported", "config.json")),
    "domino_shift_true": always(refused("unsupported", "config.json")),
    "domino_under_dflash_name": always(refused("unsupported", "config.json")),
    "domino_weights_only": always(refused("unsupported", "config.json")),
    "dspark_bonus_anchor": {
        "0.5.17": (
            refused("unsupported", "sglang version"),
            refused("unsupported", "sglang version"),
            refused("invalid", "config.json: markov_head_type"),
        ),
        "0.5.23": (
            refused("invalid", "config.json: markov_head_type"),
            refused("invalid", "config.json: markov_head_type"),
            refused("invalid", "config.json: markov_head_type"),
        ),
    },
    "dspark_markov_rank0": both(S, D, S),
    "dspark_pattern_name_only": always(refused("unsupported", "config.json:architectures")),
    "dspark_sample_from_anchor_false": {
        "0.5.17": (
            refused("unsupported", "sglang version"),
            refused("unsupported", "sglang version"),
            refused("invalid", "config.json: markov_head_type"),
        ),
        "0.5.23": (
            refused("invalid", "config.json: markov_head_type"),
            refused("invalid", "config.json: markov_head_type"),
            refused("invalid", "config.json: markov_head_type"),
        ),
    },
    "fork_dflash_label_dspark_head": both(refused("conflict", ""), D, S),
    "gemma4_dspark_null_rank": always(refused("unsupported", ARCH)),
    "k3_dspark": both(
        refused("invalid", "--speculative-dspark-block-size"),
        refused("invalid", "--speculative-dflash-block-size"),
        refused("invalid", "--speculative-dspark-block-size"),
    ),
    "legacy_logit_head_markov": always(refused("unsupported", ARCH)),
    "lfm2_dspark": always(refused("unsupported", ARCH)),
    "mask_outside_vocab": always(refused("invalid", "config.json:dflash_config.mask_token_id")),
    "no_marker": always(refused("unsupported", ARCH)),
    "query_zero_predicts_next": both(S, D, S),
    "qwen3_dspark_model": {
        "0.5.17": (S, refused("unsupported", "sglang version"), S),
        "0.5.23": (S, MF, S),
    },
    "sglang_target_bundled_dspark": always(refused("unsupported", ARCH)),
    "specforge_dflash": both(D, D, S),
    "specforge_dspark": {
        "0.5.17": (S, refused("unsupported", "sglang version"), S),
        "0.5.23": (S, MF, S),
    },
    "speculators_dflash2": always(refused("unsupported", ARCH)),
    "speculators_dflash_anchor_false": always(refused("unsupported", ARCH)),
    "speculators_dspark_anchor_true": always(refused("unsupported", ARCH)),
    "speculators_dspark_default": {
        "0.5.17": (
            refused("unsupported", ARCH),
            refused("unsupported", "sglang version"),
            refused("unsupported", ARCH),
        ),
        "0.5.23": (refused("unsupported", ARCH), refused("unsupported", ARCH), refused("unsupported", ARCH)),
    },
    "speculators_dspark_mask_fill": {
        "0.5.17": (
            refused("unsupported", "sglang version"),
            refused("unsupported", "sglang version"),
            refused("unsupported", ARCH),
        ),
        "0.5.23": (refused("unsupported", ARCH), refused("unsupported", ARCH), refused("unsupported", ARCH)),
    },
    "speculators_dspark_type_only": always(refused("unsupported", ARCH)),
    "speculators_eagle3": always(refused("unsupported", "config.json:speculators_model_type")),
    "speculators_flag_contradicts_count": {
        "0.5.17": (
            refused("conflict", ""),
            refused("unsupported", "sglang version"),
            refused("unsupported", ARCH),
        ),
        "0.5.23": (refused("conflict", ""), refused("unsupported", ARCH), refused("unsupported", ARCH)),
    },
    "speculators_tokens_b": always(refused("unsupported", ARCH)),
    "speculators_tokens_b_minus_1": always(refused("unsupported", ARCH)),
    "speculators_tokens_invalid": always(
        refused("invalid", "config.json:speculators_config.proposal_methods[0].speculative_tokens")
    ),
    "torchspec_dflash": both(
        refused("invalid", "--speculative-dflash-block-size"),
        refused("invalid", "--speculative-dflash-block-size"),
        refused("invalid", "--speculative-dspark-block-size"),
    ),
    "torchspec_dspark": both(
        refused("invalid", "--speculative-dspark-block-size"),
        refused("invalid", "--speculative-dflash-block-size"),
        refused("invalid", "--speculative-dspark-block-size"),
    ),
    "unknown_architecture": always(refused("unsupported", "config.json:architectures")),
    "zlab_dflash": both(D, D, refused("unsupported", "vocab_size")),
}


def outcome_of(builtin: str, harvest: str, mask_fill_dspark: bool) -> str:
    """The table's word for a served launch."""
    return f"{builtin}{' mask-fill' if mask_fill_dspark else ''} {harvest}"


def relative_where(where: str | None, folder: str) -> str:
    """A refusal's ``where`` with the fixture's folder left out, as the table gives it."""
    text = where or ""
    return text.replace(folder + "/", "").replace(folder, "")
