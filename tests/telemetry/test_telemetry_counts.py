"""The accept counter (``telemetry/counts.py``): the histogram, the totals, the rates and the mean
derived from it, and the counts it refuses (no round is kept)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_dspark_plugin.telemetry import AcceptCounts


def test_a_counter_keeps_no_round():
    c = AcceptCounts(4)
    for _ in range(5000):
        assert c.add([1, 2])
    assert c.rounds == 5000 and not [
        k for k, v in vars(c).items() if isinstance(v, (list, tuple)) and len(v) > 5
    ]


def test_histogram_totals_and_per_position_rates_hand_computed():
    c = AcceptCounts(4)
    c.add([0, 2, 4])
    c.add([1, 1])
    assert c.hist == [1, 2, 1, 0, 1]  # request-rounds by accepted-draft count 0..4
    # 5 request-rounds; draft k accepted where count >= k: k=1 -> {2,4,1,1}, k=2 -> {2,4}, k=3,4 -> {4}
    assert c.accepted_per_position() == [4, 2, 1, 1]
    assert c.per_position_rates() == pytest.approx([0.8, 0.4, 0.2, 0.2])
    assert c.mean_accept_length() == pytest.approx(1 + 8 / 5)
    assert (c.rounds, c.request_rounds, c.accepted_drafts) == (2, 5, 8)


def test_no_data_gives_none_not_a_made_up_number():
    c = AcceptCounts(4)
    assert c.mean_accept_length() is None and c.per_position_rates() is None
    assert c.add([]) is True  # an empty round: valid, counted nowhere
    assert c.rounds == 0 and c.hist == [0] * 5 and c.mean_accept_length() is None


@settings(max_examples=60, deadline=None)
@given(gamma=st.integers(1, 8), data=st.data())
def test_statistics_match_a_brute_force_recount(gamma, data):
    rounds = data.draw(
        st.lists(st.lists(st.integers(0, gamma), min_size=1, max_size=12), min_size=1, max_size=20)
    )
    c = AcceptCounts(gamma)
    for counts in rounds:
        assert c.add(counts)
    flat = [n for counts in rounds for n in counts]
    assert c.hist == [flat.count(n) for n in range(gamma + 1)]
    # the totals kept per round are the ones the histogram implies
    assert c.request_rounds == sum(c.hist) == len(flat)
    assert c.accepted_drafts == sum(n * k for n, k in enumerate(c.hist)) == sum(flat)
    assert c.mean_accept_length() == pytest.approx(sum(n + 1 for n in flat) / len(flat))
    expected = [sum(1 for n in flat if n >= k) / len(flat) for k in range(1, gamma + 1)]
    assert c.per_position_rates() == pytest.approx(expected)
    # Identity: the per-position rates add up to the mean number of accepted drafts.
    assert sum(c.per_position_rates()) == pytest.approx(c.mean_accept_length() - 1)


@pytest.mark.parametrize(
    "bad",
    [
        [5, 0],  # above gamma
        [-1, 2],  # negative (would index the histogram from its end)
        [1, 2.0, 3],  # a float, even a whole one
        [1, "2"],
        [None],
        [10**30],
        np.array([1.0, 2.0]),
        np.array([[1, 2]]),  # a 2-D array: its rows are not counts
    ],
    ids=repr,
)
def test_a_count_that_is_not_an_integer_in_0_to_gamma_is_kept_out(bad):
    c = AcceptCounts(4)
    c.add([1, 2])
    before = (list(c.hist), c.rounds, c.request_rounds, c.accepted_drafts)
    assert c.add(bad) is False
    assert (c.hist, c.rounds, c.request_rounds, c.accepted_drafts) == before  # a partial count undone
    assert c.invalid_rounds == 1
    assert c.add([4]) and c.rounds == 2  # later rounds count again


@pytest.mark.parametrize(
    "counts",
    [[0, 3, 4], (0, 3, 4), np.array([0, 3, 4]), [np.int32(0), np.int64(3), np.uint8(4)]],
    ids=["list", "tuple", "ndarray", "numpy-ints"],
)
def test_numpy_integers_and_sequences_count_like_a_list_of_ints(counts):
    c = AcceptCounts(4)
    assert c.add(counts)
    assert c.hist == [1, 0, 0, 1, 1] and (c.request_rounds, c.accepted_drafts) == (3, 7)
    assert json.dumps({"accepted": c.accepted_drafts})  # plain ints


def test_the_widest_gamma_counts_its_top():
    c = AcceptCounts(1024)
    assert c.add([1024, 0])
    assert c.hist[1024] == 1 and c.accepted_per_position()[-1] == 1
    assert not c.add([1025])
