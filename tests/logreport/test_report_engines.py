"""``dspark-harvest report`` on the other engines' logs: sglang's own decode line (``accept len: ...``, both
releases) and vLLM's periodic ``SpecDecoding metrics:`` line, each read into a verdict.

vLLM does not run here: its lines are written from its own format string (vLLM 0.34.0,
``vllm/v1/spec_decode/metrics.py:120-136``, copied as ``server_logs.VLLM_FORMAT``) over drafts counted the
way its ``SpecDecodingStats.observe_draft`` counts them. sglang's lines come from real builtin runs in
``tests/sglang/test_served.py``; here, from its format (``server_logs.sglang_line``), to reach cases a CPU
run cannot (long contexts, DP ranks).
"""

from __future__ import annotations

import json

import pytest
from server_logs import MISMATCHED_RATES, Log, drafts_of, rounds, sglang_line, vllm_lines

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.logreport import EXIT_COLLAPSE, EXIT_HEALTHY, EXIT_INCONCLUSIVE, engines, read_logs

SAMPLE_VLLM = (
    "(APIServer pid=4242) INFO 12-05 10:00:00 [metrics.py:120] SpecDecoding metrics: Mean acceptance "
    "length: 2.91, Accepted throughput: 57.30 tokens/s, Drafted throughput: 210.00 tokens/s, Accepted: "
    "573 tokens, Drafted: 2100 tokens, Per-position acceptance rate: 0.657, 0.480, 0.343, 0.223, 0.117, "
    "0.057, 0.033, Avg Draft acceptance rate: 27.3%"
)
"""A documented sample: vLLM 0.34.0's line for 300 drafts of 7 tokens (the format above, its numbers
consistent: 1 + 573 / 300 = 2.91, the rates sum to 1.91)."""
SAMPLE_SGLANG = (
    "[2026-12-05 13:01:53] Decode batch, #running-req: 1, #token: 61, token usage: 0.01, accept len: 4.42, "
    "accept rate: 0.49, cpu graph: False, gen throughput (token/s): 228.91, #queue-req: 0"
)
"""A line sglang 0.5.23's builtin DFLASH wrote on the CPU harness (the embedded drafters)."""


def _report(tmp_path, lines: list[str], *extra: str) -> tuple[int, dict]:
    path = tmp_path / "engine.log"
    path.write_text("\n".join(lines) + "\n")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", str(path), "--json", *extra])
    return code, json.loads(out.getvalue())


MATCHED = [0.65, 0.48, 0.35, 0.25, 0.21, 0.20, 0.17]  # the embedded mask-fill drafter, matched
MISMATCHED = MISMATCHED_RATES
WEAK = [0.35, 0.20, 0.12, 0.07, 0.04, 0.02, 0.01]  # a weak but aligned drafter: continuation ~0.6


def test_the_documented_samples_parse_into_their_own_numbers():
    w = engines.parse(SAMPLE_VLLM, 40)
    assert w is not None and (w.engine, w.request_rounds, w.gamma, w.mean) == ("vllm", 300, 7, 2.91)
    assert w.rates == (0.657, 0.480, 0.343, 0.223, 0.117, 0.057, 0.033)
    s = engines.parse(SAMPLE_SGLANG, 40)
    assert s is not None and (s.engine, s.request_rounds, s.mean, s.context, s.accept_rate) == (
        "sglang",
        40,
        4.42,
        61,
        0.49,
    )


def test_vllm_lines_from_its_own_format_are_judged_healthy_with_its_per_position_rates(tmp_path):
    drafts = drafts_of(MATCHED, 2000, seed=1)
    code, report = _report(tmp_path, vllm_lines(drafts, 7))
    (g,) = report["engines"]
    assert (code, report["verdict"], g["engine"], g["gamma"]) == (EXIT_HEALTHY, "healthy", "vllm", 7)
    assert g["request_rounds"] == 2000 and g["mean_accept_length"] == pytest.approx(
        1 + sum(drafts) / 2000, abs=0.01
    )
    expected = [sum(1 for n in drafts if n > k) / 2000 for k in range(7)]
    assert g["per_position"] == pytest.approx(expected, abs=0.001)
    assert report["groups"] == [] and report["plugin_lines"] == 0 and report["engine_lines"] == 20


def test_a_collapse_with_a_harvest_mismatchs_shape_says_so_and_names_the_next_step(tmp_path):
    code, report = _report(tmp_path, vllm_lines(drafts_of(MISMATCHED, 2000, seed=2), 6))
    (g,) = report["engines"]
    assert (code, g["verdict"]) == (EXIT_COLLAPSE, "collapse")
    assert g["continuation"] < engines.MISMATCH_CONTINUATION
    assert "shape of a harvest mismatch" in g["why"]
    assert "dspark-harvest check" in g["why"] and "dspark-harvest declare" in g["why"]


def test_a_collapse_of_a_weak_aligned_drafter_is_not_called_a_mismatch(tmp_path):
    # gamma 2 caps the threshold at 1.6; a weak drafter's profile over two positions
    code, report = _report(tmp_path, vllm_lines(drafts_of([0.30, 0.18], 2000, seed=3), 2))
    (g,) = report["engines"]
    assert (code, g["verdict"]) == (EXIT_COLLAPSE, "collapse")
    assert g["continuation"] >= engines.MISMATCH_CONTINUATION
    assert "not a harvest mismatch" in g["why"]


def test_a_weak_but_aligned_profile_keeps_its_continuation():
    assert engines.continuation(WEAK) > engines.MISMATCH_CONTINUATION > engines.continuation(MISMATCHED)
    assert engines.continuation(MATCHED) > engines.MISMATCH_CONTINUATION
    assert engines.continuation([0.0, 0.0, 0.0]) is None


def test_too_few_drafts_are_inconclusive_and_exit_4(tmp_path):
    code, report = _report(tmp_path, vllm_lines(drafts_of(MISMATCHED, 30, seed=4), 6, per_line=10))
    assert (code, report["verdict"], report["engines"][0]["verdict"]) == (
        EXIT_INCONCLUSIVE,
        "inconclusive",
        "inconclusive",
    )
    assert "fewer than 50" in report["engines"][0]["why"]


def test_vllm_lines_whose_numbers_disagree_are_rejected_not_read(tmp_path):
    good = vllm_lines(drafts_of(MATCHED, 200, seed=5), 7)
    head, tail = good[0].split("Mean acceptance length: ")
    lying = head + "Mean acceptance length: 1.05" + tail[tail.index(",") :]  # a collapse the counts deny
    code, report = _report(tmp_path, [*good, lying])
    (g,) = report["engines"]
    assert (g["rejected_lines"], g["lines"], g["verdict"]) == (1, len(good), "healthy")


def test_sglang_lines_are_weighted_by_their_running_requests_and_the_interval(tmp_path):
    lines = [sglang_line(3.0, 0.29, running=8), sglang_line(1.0, 0.0, running=1)]
    code, report = _report(tmp_path, lines * 3, "--decode-log-interval", "10")
    (g,) = report["engines"]
    assert g["request_rounds"] == 3 * (8 + 1) * 10 and g["request_rounds_estimated"] is True
    assert g["mean_accept_length"] == pytest.approx(1 + (2.0 * 8) / 9)
    assert g["gamma"] == 7 and g["per_position"] is None  # (3.00 - 1) / 0.29 = 6.9
    assert (code, g["verdict"]) == (EXIT_HEALTHY, "healthy")


def test_a_collapsed_sglang_log_says_it_cannot_tell_a_mismatch_and_names_the_next_step(tmp_path):
    code, report = _report(tmp_path, [sglang_line(1.04, 0.01) for _ in range(10)])
    (g,) = report["engines"]
    assert (code, g["verdict"]) == (EXIT_COLLAPSE, "collapse")
    assert "no per-position rates" in g["why"] and "dspark-harvest check" in g["why"]


def test_an_sglang_collapse_at_long_context_only_is_named_so_by_the_servers_rule(tmp_path):
    short = [sglang_line(3.2, 0.31, running=4, tokens=4 * 300) for _ in range(10)]
    long = [sglang_line(1.1, 0.01, running=4, tokens=4 * 9000) for _ in range(10)]
    code, report = _report(tmp_path, short + long)
    (g,) = report["engines"]
    assert (code, g["verdict"]) == (EXIT_COLLAPSE, "collapse")
    assert "falls with context length only" in g["why"] and "past about 512 tokens" in g["why"]
    assert [b["bucket"] for b in g["by_context"]] == ["<=512", "<=16k"]


def test_sglang_dp_ranks_are_separate_groups_and_the_worst_decides(tmp_path):
    lines = [sglang_line(3.0, 0.29, dp=0), sglang_line(1.02, 0.01, dp=1)] * 5
    code, report = _report(tmp_path, lines)
    assert [(g["dp"], g["verdict"]) for g in report["engines"]] == [(0, "healthy"), (1, "collapse")]
    assert code == EXIT_COLLAPSE


def test_engine_lines_inside_request_text_are_ignored(tmp_path):
    quoted = "[2026-12-05 10:00:00] Receive: obj=GenerateReqInput(text='" + sglang_line(1.0, 0.0) + "')"
    code, report = _report(tmp_path, [quoted] * 20 + [sglang_line(3.1, 0.3)] * 3)
    assert report["engines"][0]["lines"] == 3 and report["engines"][0]["verdict"] == "healthy"


def test_a_log_with_the_plugins_lines_and_sglangs_is_read_for_both(tmp_path):
    log = Log(tmp_path / "server.log")
    rounds(log.process(), 300, seed=7)
    log.close()
    with open(tmp_path / "server.log", "a") as f:
        for _ in range(5):
            f.write(sglang_line(3.0, 0.3) + "\n")
    report = read_logs([str(tmp_path / "server.log")]).to_json()
    assert len(report["groups"]) == 1 and report["groups"][0]["rounds"] == 300
    assert report["engine_lines"] == 5 and report["engines"][0]["engine"] == "sglang"
    assert report["verdict"] == "healthy"


def test_an_inconclusive_engine_group_beside_judged_rounds_changes_no_verdict(tmp_path):
    log = Log(tmp_path / "server.log")
    rounds(log.process(), 300, seed=8)
    log.close()
    with open(tmp_path / "server.log", "a") as f:
        f.write(vllm_lines(drafts_of(MATCHED, 10, seed=9), 7)[0] + "\n")
    report = read_logs([str(tmp_path / "server.log")]).to_json()
    assert report["engines"][0]["verdict"] == "inconclusive" and report["verdict"] == "healthy"


def test_a_log_with_no_acceptance_line_of_any_engine_is_refused(tmp_path, capsys):
    path = tmp_path / "plain.log"
    path.write_text("[2026-12-05 10:00:00] Prefill batch, #new-seq: 1\n" * 3)
    assert main(["report", str(path)]) == 2
    assert "nor sglang's decode lines" in capsys.readouterr().err


def test_the_decode_log_interval_flag_is_checked(tmp_path, capsys):
    path = tmp_path / "engine.log"
    path.write_text(sglang_line(3.0, 0.3) + "\n")
    assert main(["report", str(path), "--decode-log-interval", "0"]) == 2
    assert "decode batches" in capsys.readouterr().err


def test_the_mismatch_shape_holds_on_the_reference_engines_real_rounds():
    """``MISMATCH_CONTINUATION`` separates real rounds, not only the profiles above: the reference engine
    decodes with an embedded drafter of each training strategy under both harvests; every matched arm
    keeps its accepted drafts going above the bar, every mismatched arm falls below it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import load_drafter, speculative_generate
    from sglang_dspark_plugin.harvest import DsparkHarvest

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(EMBEDDED.target), local_files_only=True)
    target = AutoModelForCausalLM.from_pretrained(
        str(EMBEDDED.target), local_files_only=True, dtype=torch.float32
    ).eval()
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in EMBEDDED.prompts[:3]]
    found = {}
    for name, trained in (("drafter-dflash", "dflash"), ("drafter-dspark-markov", "dspark")):
        drafter = load_drafter(EMBEDDED.root / name).eval()
        for harvest in ("dflash", "dspark"):
            h = DsparkHarvest.from_name(harvest)
            lengths = [
                n for p in prompts for n in speculative_generate(target, drafter, p, h, 32).accept_lengths
            ]
            gamma = h.n_drafts(8 if trained == "dflash" else 7)  # the embedded blocks: 8 and 7
            rates = [sum(1 for n in lengths if n - 1 > k) / len(lengths) for k in range(gamma)]
            found[(name, harvest == trained)] = engines.continuation(rates)
    for (name, matched), kept in found.items():
        assert kept is not None, name
        assert (kept > engines.MISMATCH_CONTINUATION) == matched, (name, matched, kept)
