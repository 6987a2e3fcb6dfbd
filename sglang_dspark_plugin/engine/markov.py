"""DSpark's Markov head and confidence head, with sglang's arithmetic and parameter names.

A Markov head turns a block draft semi-autoregressive: draft j's logits are its row's base logits
(``lm_head(row)``) plus a bias computed from the token drafted just before it, draft j-1, and from the
anchor for the first draft. Greedy drafting picks draft 1, which conditions draft 2's bias, and so on
across the block. The three head types are sglang's (``models/dspark.py``, the same arithmetic in
0.5.17 and 0.5.23; SpecForge's ``dspark.py`` trains the same modules under the same names):

* ``vanilla``: ``bias = markov_w2(markov_w1[prev])``, a rank-r factorisation of a token bigram table;
* ``gated``: ``bias = markov_w2(g * markov_w1[prev])``, ``g = sigmoid(gate_proj([row ; markov_w1[prev]]))``;
* ``rnn``: a gated recurrence over the block (``joint_proj``), its state starting at zero per block.

The confidence head predicts, per draft, the probability that the target accepts it. sglang uses it
only to size ragged verify windows (``SGLANG_RAGGED_VERIFY_MODE`` other than ``static``); it never
changes a drafted token, and the reference engine verifies every draft (sglang's default, ``static``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..census.markov import HEAD_TYPES

MARKOV_HEAD_TYPES = HEAD_TYPES
"""The head types sglang 0.5.17 and 0.5.23 build: the census's one list (``census.markov.HEAD_TYPES``)."""


class VanillaMarkov(nn.Module):
    """The low-rank previous-token bias: ``markov_w2(markov_w1[prev])``."""

    head_type = "vanilla"

    def __init__(self, *, vocab_size: int, markov_rank: int) -> None:
        super().__init__()
        if markov_rank <= 0:
            raise ValueError(f"a Markov head needs markov_rank > 0, got {markov_rank}")
        self.vocab_size, self.markov_rank = int(vocab_size), int(markov_rank)
        self.markov_w1 = nn.Embedding(self.vocab_size, self.markov_rank)
        self.markov_w2 = nn.Linear(self.markov_rank, self.vocab_size, bias=False)

    def get_prev_embeddings(self, prev_tokens: torch.Tensor) -> torch.Tensor:
        """``markov_w1`` rows of the previous tokens ``[N]`` -> ``[N, r]``."""
        return self.markov_w1(prev_tokens.long())

    def init_state(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """The state the first step of N blocks reads, from their first rows ``[N, H]`` (none here)."""
        return None

    def step_bias(
        self, prev_tokens: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One draft step: the ``[N, V]`` bias for rows ``hidden`` ``[N, H]`` and the next state."""
        return self.markov_w2(self.get_prev_embeddings(prev_tokens)), state


class GatedMarkovHead(VanillaMarkov):
    """The vanilla bias with its rank-r latent gated by the draft row and the previous token."""

    head_type = "gated"

    def __init__(self, *, vocab_size: int, markov_rank: int, hidden_size: int) -> None:
        super().__init__(vocab_size=vocab_size, markov_rank=markov_rank)
        self.gate_proj = nn.Linear(int(hidden_size) + self.markov_rank, self.markov_rank)

    def step_bias(
        self, prev_tokens: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        prev = self.get_prev_embeddings(prev_tokens)
        gate = torch.sigmoid(self.gate_proj(torch.cat([hidden, prev], dim=-1))).to(prev.dtype)
        return self.markov_w2(gate * prev), state


class RNNHead(VanillaMarkov):
    """A gated recurrence over the block: each step reads the state, the previous token and the row."""

    head_type = "rnn"

    def __init__(self, *, vocab_size: int, markov_rank: int, hidden_size: int) -> None:
        super().__init__(vocab_size=vocab_size, markov_rank=markov_rank)
        self.joint_proj = nn.Linear(2 * self.markov_rank + int(hidden_size), 3 * self.markov_rank)

    def init_state(self, hidden: torch.Tensor) -> torch.Tensor:
        # zero at the start of every block, in the rows' dtype (sglang's RNNHead.init_state)
        return torch.zeros(hidden.shape[0], self.markov_rank, device=hidden.device, dtype=hidden.dtype)

    def step_bias(
        self, prev_tokens: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert state is not None, "RNNHead.step_bias needs the state of init_state or the previous step"
        z = torch.cat([state, self.get_prev_embeddings(prev_tokens), hidden], dim=-1)
        gate_raw, candidate_raw, output_raw = self.joint_proj(z).chunk(3, dim=-1)
        gate = torch.sigmoid(gate_raw)
        new_state = gate * state + (1.0 - gate) * torch.tanh(candidate_raw)
        return self.markov_w2(torch.tanh(output_raw)), new_state


def build_markov_head(
    head_type: str, *, vocab_size: int, markov_rank: int, hidden_size: int
) -> VanillaMarkov:
    """The Markov head of ``head_type`` (one of ``MARKOV_HEAD_TYPES``), randomly initialised."""
    if head_type == "vanilla":
        return VanillaMarkov(vocab_size=vocab_size, markov_rank=markov_rank)
    if head_type == "gated":
        return GatedMarkovHead(vocab_size=vocab_size, markov_rank=markov_rank, hidden_size=hidden_size)
    if head_type == "rnn":
        return RNNHead(vocab_size=vocab_size, markov_rank=markov_rank, hidden_size=hidden_size)
    raise ValueError(f"unknown markov_head_type {head_type!r}; known: {', '.join(MARKOV_HEAD_TYPES)}")


class ConfidenceHead(nn.Module):
    """Per-draft acceptance predictor: ``proj([row ; markov_w1[prev]])`` (or ``proj(row)``), a logit."""

    def __init__(self, *, hidden_size: int, markov_rank: int, with_markov: bool, bias: bool = True) -> None:
        super().__init__()
        self.with_markov = bool(with_markov)
        self.proj = nn.Linear(int(hidden_size) + (int(markov_rank) if self.with_markov else 0), 1, bias=bias)

    def forward(self, hidden: torch.Tensor, prev_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """The raw confidence logit of each row ``[..., H]`` -> ``[...]``."""
        features = hidden
        if self.with_markov:
            assert prev_embeddings is not None, "a confidence head with_markov needs markov_w1[prev]"
            features = torch.cat([hidden, prev_embeddings.to(hidden.dtype)], dim=-1)
        return self.proj(features.to(self.proj.weight.dtype)).squeeze(-1)

    def predict(
        self,
        hidden: torch.Tensor,
        anchor: torch.Tensor,
        drafts: torch.Tensor,
        markov_head: VanillaMarkov | None,
    ) -> torch.Tensor:
        """sglang's confidence of one drafted block: ``sigmoid(raw)`` per draft, ``[gamma]``.

        ``hidden`` are the harvested rows ``[gamma, H]``; draft j's previous token is the anchor for
        j = 1 and draft j-1 after that, as in drafting.
        """
        prev_embeddings = None
        if self.with_markov:
            assert markov_head is not None, "a confidence head with_markov needs the Markov head"
            prev_tokens = torch.cat([anchor.view(1), drafts[:-1]])
            prev_embeddings = markov_head.get_prev_embeddings(prev_tokens)
        return torch.sigmoid(self(hidden, prev_embeddings).float())


def draft_block(
    head: VanillaMarkov,
    base_logits: torch.Tensor,
    hidden: torch.Tensor,
    anchor: torch.Tensor,
    *,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draft ``gamma`` tokens row by row, each row's logits biased by the token drafted before it.

    ``base_logits`` ``[gamma, V]`` and ``hidden`` ``[gamma, H]`` are the harvested rows in draft order,
    ``anchor`` the committed token the block starts from (the previous token of draft 1). Returns the
    drafts ``[gamma]`` and, at temperature > 0, the distribution each draft was sampled from
    ``[gamma, V]``: ``softmax((base + bias(previous draft)) / T)``, conditioned on the previous draft
    actually sampled, which is what rejection sampling must compare with.
    """
    state = head.init_state(hidden[:1])  # one block
    prev = anchor.reshape(1).long()
    drafts, probs = [], []
    for j in range(base_logits.shape[0]):
        bias, state = head.step_bias(prev, hidden[j : j + 1], state)
        # the sum in the rows' dtype, as sglang adds them; the sampling math in float32
        logits = (base_logits[j : j + 1] + bias).float()
        if temperature > 0:
            q = torch.softmax(logits / temperature, dim=-1)
            prev = torch.multinomial(q, 1, generator=generator).view(1)
            probs.append(q)
        else:
            prev = logits.argmax(-1)
        drafts.append(prev)
    return torch.cat(drafts), (torch.cat(probs) if probs else None)


def describe_heads(
    markov_head: VanillaMarkov | None, confidence_head: ConfidenceHead | None
) -> dict[str, Any]:
    """``{"markov_head": {type, rank} | None, "confidence_head": {with_markov, input_width} | None}``."""
    return {
        "markov_head": None
        if markov_head is None
        else {"type": markov_head.head_type, "rank": markov_head.markov_rank},
        "confidence_head": None
        if confidence_head is None
        else {"with_markov": confidence_head.with_markov, "input_width": confidence_head.proj.in_features},
    }


__all__ = [
    "MARKOV_HEAD_TYPES",
    "VanillaMarkov",
    "GatedMarkovHead",
    "RNNHead",
    "ConfidenceHead",
    "build_markov_head",
    "draft_block",
    "describe_heads",
]
