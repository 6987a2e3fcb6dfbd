"""Served tests: sglang's real engine on CPU (scheduler, overlap loop, radix cache, worker rounds).

Every run of ``tests/sglang/served_cases.py`` is served once per module by ``served.run_engine`` (a
subprocess with the test-side CPU patches) and checked against the builtin it mirrors, against the
reference engine (``sglang_dspark_plugin.engine``) and against the target's own greedy tokens.

Accept lengths are compared per request in two forms: sglang's ``meta_info`` figure
(``completion_tokens / spec_verify_ct``) against the reference engine's tokens / rounds, and, for the
plugin's runs, the per-round accept lengths of its log against the reference engine's rounds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sglang

REPO = Path(__file__).resolve().parents[2]

import served_cases as sc  # noqa: E402
from served import run_engine  # noqa: E402

from sglang_dspark_plugin.embedded import EMBEDDED  # noqa: E402
from sglang_dspark_plugin.engine import load_drafter, speculative_generate  # noqa: E402
from sglang_dspark_plugin.harvest import DsparkHarvest  # noqa: E402

CASES = sc.cases_for(
    sglang.__version__
)  # the mask-fill DSPARK layout needs 0.5.23 (test_builtin: refused before)
RUN_NAMES = [run.name for run in sc.runs_of(CASES)]
REFERENCE_RUNS = [name for c in CASES if c.kind == "reference" for name in c.runs]


@pytest.fixture(scope="module")
def drafters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return sc.drafter_folders(EMBEDDED.root, tmp_path_factory.mktemp("drafters"))


class Reference:
    """The reference engine's generations, per (drafter, harvest), computed once."""

    def __init__(self, target, prompts, drafters) -> None:
        self.target, self.prompts, self.drafters = target, prompts, drafters
        self._cache: dict[tuple[str, str], list] = {}

    def __call__(self, drafter: str, harvest: str) -> list:
        key = (drafter, harvest)
        if key not in self._cache:
            model = load_drafter(self.drafters[drafter]).eval()
            h = DsparkHarvest.from_name(harvest)
            self._cache[key] = [
                speculative_generate(self.target, model, p, h, sc.MAX_NEW_TOKENS) for p in self.prompts
            ]
        return self._cache[key]


@pytest.fixture(scope="module")
def reference(target, prompts, drafters) -> Reference:
    return Reference(target, prompts, drafters)


class ServedRuns:
    """Each run served once per module, on demand, as a ``served_cases.Outcome``."""

    def __init__(self, prompts, drafters) -> None:
        self.prompts, self.drafters = prompts, drafters
        self._runs: dict[str, sc.Outcome] = {}

    def __call__(self, name: str) -> sc.Outcome:
        if name not in self._runs:
            run = sc.RUNS[name]
            batches = [[p] for p in self.prompts]
            if run.concurrent:
                batches.append(list(self.prompts[: sc.CONCURRENT_REQUESTS]))
            model, draft = sc.launch_paths(run, EMBEDDED.target, self.drafters)
            engine_args = {
                "model_path": str(model),
                "speculative_algorithm": run.algorithm,
                **({} if draft is None else {"speculative_draft_model_path": str(draft)}),
                **dict(run.extra_args),
            }
            got = run_engine(
                engine_args, batches, sc.MAX_NEW_TOKENS, env=run.env(), await_request_lines=run.plugin
            )
            n = len(self.prompts)
            self._runs[name] = sc.Outcome(
                outputs=got.outputs[:n],
                metas=got.metas[:n],
                log=got.log,
                concurrent_outputs=got.outputs[n:],
                concurrent_metas=got.metas[n:],
            )
        return self._runs[name]


@pytest.fixture(scope="module")
def served(prompts, drafters) -> ServedRuns:
    return ServedRuns(prompts, drafters)


def case(name: str) -> sc.Case:
    return next(c for c in CASES if c.name == name)


def assert_checks(checks: list[sc.Check]) -> None:
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert not failed, "\n".join(failed)


# ---------------------------------------------------------------- the cases (tests/sglang/served_cases.py)


@pytest.mark.parametrize("name", [c.name for c in CASES if c.kind == "identical"])
def test_plugin_arm_serves_exactly_as_the_builtin(name, served, greedy):
    builtin, plugin = (served(r) for r in case(name).runs)
    assert_checks(sc.check_identical(builtin, plugin, greedy, case(name).window))


@pytest.mark.parametrize("run_name", REFERENCE_RUNS)
def test_served_equals_reference_engine(run_name, served, reference, greedy):
    run = sc.RUNS[run_name]
    ref = reference(run.drafter, run.served_harvest)
    assert_checks(
        sc.check_reference(
            run, served(run_name), [g.tokens for g in ref], [g.accept_lengths for g in ref], greedy
        )
    )


def test_forced_harvests_collapse_in_real_rounds(served, greedy):
    outcomes = {name: served(name) for name in case("forced-harvest-collapse").runs}
    assert_checks(sc.check_collapse(outcomes, greedy))


def test_a_drafter_with_random_weights_is_not_told_to_flip_the_harvest(served, greedy):
    (name,) = case("random-weights-match-no-offset").runs
    assert_checks(sc.check_no_match(served(name), greedy))


@pytest.mark.parametrize("run_name", case("concurrent-requests").runs)
def test_concurrent_requests_are_lossless(run_name, served, greedy):
    got = served(run_name)
    assert len(got.concurrent_outputs) == sc.CONCURRENT_REQUESTS
    assert_checks(sc.check_concurrent(got, greedy))


@pytest.mark.parametrize(
    "run_name, verdict",
    [("builtin-DFLASH/dflash", "healthy"), ("builtin-DFLASH/dspark-as-dflash", "collapse")],
)
def test_report_reads_the_builtins_own_decode_lines_into_a_verdict(run_name, verdict, served, tmp_path):
    """``dspark-harvest report`` on a log sglang's builtin DFLASH wrote (no plugin line in it): its decode
    lines (``accept len: ...``) are read, each weighed by its running requests; the mean is near the
    requests' own figure (sglang's meta_info: tokens over verify rounds; within 0.3, since the rounds
    after the last line are in no line); and the verdict follows: the matched drafter healthy, the
    mislabelled export (a shifted drafter under a mask-fill config) collapsed, with the next step named."""
    import re

    from sglang_dspark_plugin.logreport import VERDICT_CODES, read_logs

    got = served(run_name)
    log = tmp_path / "builtin.log"
    log.write_text(got.log)
    assert "dspark accept" not in got.log and "accept len: " in got.log
    report = read_logs([str(log)]).to_json()
    (group,) = report["engines"]
    decode_lines = got.log.count("Decode batch, #running-req: ")
    assert group["engine"] == "sglang" and group["lines"] == decode_lines > 0 and group["rejected_lines"] == 0
    stated = [
        (int(r), float(m)) for r, m in re.findall(r"#running-req: (\d+), .*?accept len: ([\d.]+),", got.log)
    ]
    assert group["mean_accept_length"] == pytest.approx(
        sum(r * m for r, m in stated) / sum(r for r, _ in stated)
    )
    tokens = sum(int(m["completion_tokens"]) for m in got.metas)
    rounds = sum(int(m["spec_verify_ct"]) for m in got.metas)
    assert group["mean_accept_length"] == pytest.approx(tokens / rounds, abs=0.3)
    assert (report["verdict"], report["exit_code"]) == (verdict, VERDICT_CODES[verdict])
    if verdict == "collapse":
        assert "dspark-harvest check" in group["why"] and "no per-position rates" in group["why"]


@pytest.mark.parametrize("run_name", ["plugin/dflash", "plugin/dflash-queue-thread"])
def test_each_finished_request_gets_a_line_that_agrees_with_sglangs_meta_info(served, run_name):
    """The per-request line (``MEMRA_DSPARK_REQUEST_LOG``, on by default) for every request, alone and
    concurrent: its verify rounds are sglang's ``spec_verify_ct`` for that request id, and the tokens its
    rounds accepted are sglang's completion tokens (``spec_accept_length`` x rounds) less the prefill's
    token, which no round accepted, or more by what the last round accepted past ``max_new_tokens``
    (sglang cuts the output there; the round's counts hold it)."""
    import re

    got = served(run_name)
    # the queue's place and why: the run that sets MEMRA_DSPARK_QUEUE_THREAD=1, else auto from the
    # device sglang resolved (the harness serves on CPU)
    threaded = sc.RUNS[run_name].queue_thread
    where = "on its own thread (MEMRA_DSPARK_QUEUE_THREAD=1)" if threaded else "on the scheduler's thread"
    assert f"telemetry queue {where}" in got.log
    assert threaded or "telemetry queue on the scheduler's thread (auto: device cpu)" in got.log
    lines = {
        rid: (int(rounds), int(accepted), float(mean))
        for rid, rounds, accepted, mean in re.findall(
            r"dspark accept request rid=(\S+) rounds=(\d+) accepted_drafts=(\d+) accept_len=([\d.]+) ",
            got.log,
        )
    }
    metas = got.metas + got.concurrent_metas
    assert len(lines) == len(metas) == len(set(lines))
    for meta in metas:
        rounds, accepted, mean = lines[meta["id"]]
        assert rounds == int(meta["spec_verify_ct"]), meta["id"]
        tokens = int(meta["completion_tokens"])
        counted = rounds + accepted  # the tokens the rounds accepted, bonus included
        assert tokens - 1 <= counted, (meta["id"], rounds, accepted, tokens)
        if counted > tokens:  # the last round accepted past the budget, and sglang cut the output there
            assert tokens == sc.MAX_NEW_TOKENS and counted - tokens <= 7, (meta["id"], counted, tokens)
        assert mean == pytest.approx(counted / rounds, abs=0.006)  # the line's own figures agree
        assert float(meta["spec_accept_length"]) == pytest.approx(tokens / rounds)  # and sglang's


def test_launch_server_discovers_the_plugin_and_serves_http(drafters, prompts, greedy):
    """The user's command: ``python -m sglang.launch_server ... --speculative-algorithm DSPARK_HARVEST``;
    sglang finds the plugin through its entry point in the server's own processes."""
    from served import cpu_launch_flags, launch_server, post_json

    flags = cpu_launch_flags()
    args = [
        "--model-path",
        str(EMBEDDED.target),
        "--speculative-algorithm",
        sc.PLUGIN,
        "--speculative-draft-model-path",
        str(drafters["dflash"]),
        "--log-level",
        "info",
        *flags,
    ]
    with launch_server(args) as (url, read_log, _):
        answer = post_json(
            url + "/generate",
            {
                "input_ids": prompts[0],
                "sampling_params": {
                    "temperature": 0,
                    "max_new_tokens": sc.MAX_NEW_TOKENS,
                    "ignore_eos": True,
                },
            },
        )
        log = read_log()
    assert answer["output_ids"] == greedy[0]
    assert answer["meta_info"]["spec_verify_ct"] < sc.MAX_NEW_TOKENS  # drafts were accepted
    assert "DSPARK_HARVEST: harvest=dflash" in log  # the plugin's startup line, from the entry point
    assert "dspark accept round=" in log  # per-round telemetry from the scheduler process
    _report_reads_the_real_log(log, answer["meta_info"]["spec_verify_ct"])


def _report_reads_the_real_log(log: str, verify_rounds: int) -> None:
    """``dspark-harvest report`` on the real server's log, in sglang's own line format: every line of
    the plugin's parsed (none malformed), the gamma of the launch's manifest, every round counted."""
    import json
    import tempfile

    from sglang_dspark_plugin.logreport import read_logs

    manifest = json.loads(log.split("geometry manifest: ", 1)[1].split("\n", 1)[0])

    with tempfile.NamedTemporaryFile("w", suffix=".log") as file:
        file.write(log)
        file.flush()
        report = read_logs([file.name]).to_json()
    assert report["malformed"] == 0 and report["plugin_lines"] > 0, report
    (group,) = report["groups"]
    assert group["gamma"] == manifest["gamma"] and group["gamma_from"] == "startup line"
    assert group["harvest"] == "dflash"
    assert group["rounds"] == log.count("dspark accept round=") and group["rejected_lines"] == 0
    assert group["request_rounds"] >= verify_rounds  # sglang's own warm-up request is counted too
    assert report["verdict"] == "healthy"
