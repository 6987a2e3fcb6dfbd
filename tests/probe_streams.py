"""Token streams for the live offset probe's tests (shared by tests/probe and tests/telemetry): a
deterministic sequence, one request driven through a probe round by round, a probe fed a whole
population of requests drafting some positions off."""

from __future__ import annotations

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings, row_of_round, verify_row

EVERY_ROUND = ProbeSettings(rounds=10**9)


def sequence(n: int, seed: int = 7) -> list[int]:
    """A deterministic token sequence with few repeats (vocabulary 1000)."""
    return [(seed * 7919 + i * 104729) % 1000 for i in range(n)]


def drive(
    probe: LiveProbe, seq: list[int], gamma: int, shift: int, *, rid: object = "r", accept: int = 0
) -> None:
    """One request decoding ``seq`` from position 10: each round drafts ``seq`` shifted by ``shift``
    (0 aligned, +1 one position late) and commits ``accept`` drafts + the bonus, fed as sglang's row."""
    pos = 10
    while pos + gamma + 2 < len(seq):
        probe.begin_round()
        drafts = [seq[pos + j + shift] for j in range(1, gamma + 1)]
        committed = seq[pos + 1 : pos + accept + 2]
        if probe.wants(rid):
            probe.observe(rid, pos, seq[pos], verify_row(row_of_round(drafts, committed), len(committed)))
        pos += len(committed)
    probe.finish(rid)


def fed(shift: int, requests: int = 40) -> LiveProbe:
    """A probe of dflash-harvested drafts over ``requests`` requests drafting ``shift`` positions off
    (+1: one position late)."""
    probe = LiveProbe(DsparkHarvest.DFLASH, EVERY_ROUND)
    for r in range(requests):
        drive(probe, sequence(120, seed=r), 4, shift, rid=r)
    return probe
