"""Served under load, as an operator runs it: one ``launch_server`` with ``DSPARK_HARVEST`` and one with
the builtin it resolves to, the same load on both (sglang's real engine on CPU, over HTTP).

* **Load** (``test_load``): concurrent requests, streams the client drops after a few chunks,
  ``max_new_tokens`` 1, malformed requests. Every completed request's tokens equal the builtin's; the
  plugin's per-round lines (read by ``dspark-harvest report``'s reader) add up to sglang's own
  ``spec_verify_ct`` exactly in the phase where nothing was aborted, and within the aborted requests'
  budgets where something was; what the plugin holds (the probe's requests) is back to 0 at the end.
* **Retraction** (``test_retraction``): a KV pool too small for the requests running at once, so
  sglang retracts running requests and re-queues them. The same checks, plus: sglang did retract, and
  the retraction itself raised no alarm and no probe verdict.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

import served_cases as sc  # noqa: E402
from served import cpu_launch_flags, launch_server, post_json  # noqa: E402

from sglang_dspark_plugin.embedded import EMBEDDED  # noqa: E402
from sglang_dspark_plugin.logreport import read_logs  # noqa: E402

LOAD_NEW_TOKENS = 24
ENV = {"MEMRA_DSPARK_SUMMARY_EVERY": "10", "MEMRA_DSPARK_CONTEXT_BUCKETS": "64,128"}
LOAD_ENV = {**ENV, "MEMRA_DSPARK_HOST_TIMING": "1"}  # the host-cost gauge the dashboard shows
READY = "The server is fired up and ready to roll!"


def _args(algorithm: str, overrides: dict[str, Any] | None = None) -> list[str]:
    return [
        "--model-path",
        str(EMBEDDED.target),
        "--speculative-algorithm",
        algorithm,
        "--speculative-draft-model-path",
        str(EMBEDDED.drafters["dflash"]),
        "--log-level",
        "info",
        "--enable-metrics",
        *cpu_launch_flags(overrides),
    ]


def _generate(url: str, ids: list[int], new_tokens: int) -> dict[str, Any]:
    params = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
    answer: dict[str, Any] = post_json(url + "/generate", {"input_ids": ids, "sampling_params": params})
    return answer


def _dropped_stream(url: str, ids: list[int], chunks: int) -> int:
    """A streamed request the client drops after ``chunks`` chunks; the chunks read."""
    payload = {
        "input_ids": ids,
        "stream": True,
        "sampling_params": {"temperature": 0, "max_new_tokens": 200, "ignore_eos": True},
    }
    request = urllib.request.Request(
        url + "/generate", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    read = 0
    with urllib.request.urlopen(request, timeout=600) as stream:
        for line in stream:
            read += line.startswith(b"data:")
            if read >= chunks:
                break
    return read


def _malformed(url: str) -> list[int]:
    """HTTP status of requests sglang must refuse: a body that is not JSON, a negative token budget,
    a prompt of the wrong type. (A token id outside the vocabulary is not among them: sglang's CPU
    engine does not check it, builtin or plugin alike.)"""
    statuses = []
    for body in (
        b"{not json",
        json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": -5}}).encode(),
        json.dumps({"text": 5, "sampling_params": {"max_new_tokens": 4}}).encode(),
    ):
        request = urllib.request.Request(
            url + "/generate", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                statuses.append(r.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
    return statuses


def _rounds(log: str) -> dict[str, Any]:
    """The plugin's group as ``dspark-harvest report`` reads it from ``log``."""
    with tempfile.NamedTemporaryFile("w", suffix=".log") as file:
        file.write(log)
        file.flush()
        report = read_logs([file.name]).to_json()
    assert report["malformed"] == 0, report
    (group,) = report["groups"] or [{"request_rounds": 0, "rounds": 0}]
    return group


def _exposition(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        return str(r.read().decode())


def _metrics(url: str) -> dict[str, float]:
    """The plugin's Prometheus samples, ``name{labels}`` -> value, summed over processes."""
    text = _exposition(url)
    values: dict[str, float] = {}
    for name, labels, value in re.findall(r"^(dspark_harvest_\w+)(\{[^}]*\})? ([0-9.e+-]+)$", text, re.M):
        key = name + re.sub(r',?\w+="[^"]*pid[^"]*"', "", labels or "")  # sglang's pid label, if any
        values[key] = values.get(key, 0.0) + float(value)
    return values


def _held(url: str) -> tuple[float | None, float | None]:
    """(requests the probe holds, requests its sweep dropped), from the plugin's Prometheus metrics."""
    values = _metrics(url)
    return (
        values.get("dspark_harvest_probe_requests_held"),
        values.get("dspark_harvest_probe_swept_requests_total"),
    )


POLLS = 1500
"""How often a wait on the server's state looks (every 0.2 s): the bound of a wait, not its length."""


def _wait_ready(read_log: Any) -> None:
    """Until sglang's own warm-up request has finished (its line in the server's log)."""
    for _ in range(POLLS):
        if READY in read_log():
            return
        time.sleep(0.2)
    raise AssertionError(f"the server never logged {READY!r}: {read_log()[-3000:]}")


_ROUND_BS = re.compile(r"dspark accept round=\d+ bs=(\d+) ")


def _settled(url: str, read_log: Any, algorithm: str) -> None:
    """Until the plugin's server is idle by its own state: every request-round its lines counted is in
    /metrics too, and its probe holds no request (the last request's end ran the queue, logged the
    rounds and pushed the counters). A builtin server has no plugin state: nothing to wait on."""
    if algorithm != sc.PLUGIN:
        return
    logged, exported = 0, None
    for _ in range(POLLS):
        values = _metrics(url)
        logged = sum(int(bs) for bs in _ROUND_BS.findall(read_log()))
        exported = values.get("dspark_harvest_request_rounds_total")
        if exported == logged and values.get("dspark_harvest_probe_requests_held") == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"the plugin never settled: {logged} request-rounds logged, {exported} exported")


def _serve_load(algorithm: str, prompts: list[list[int]]) -> dict[str, Any]:
    """The load on one server: phase A (nothing aborted), phase B (dropped streams alongside)."""
    with launch_server(_args(algorithm), env=LOAD_ENV) as (url, read_log, _):
        _wait_ready(read_log)
        start_a = len(read_log())
        long_prompts = [(prompts[i] * 8)[:200] for i in range(2)]  # past the 128-token bucket
        jobs = [(p, LOAD_NEW_TOKENS) for p in prompts] + [(p, 1) for p in prompts[:3]]
        jobs += [(p, LOAD_NEW_TOKENS) for p in long_prompts]
        with ThreadPoolExecutor(8) as pool:
            answers_a = list(pool.map(lambda job: _generate(url, *job), jobs))
            malformed = _malformed(url)
        _settled(url, read_log, algorithm)  # the last round lines of the scheduler are in the log
        log_a = read_log()[start_a:]
        start_b = len(read_log())
        with ThreadPoolExecutor(8) as pool:
            dropped = [pool.submit(_dropped_stream, url, prompts[i], 1 + i % 3) for i in range(4)]
            answers_b = list(pool.map(lambda p: _generate(url, p, LOAD_NEW_TOKENS), prompts[4:]))
            chunks = [f.result() for f in dropped]
        _settled(url, read_log, algorithm)
        log_b = read_log()[start_b:]
        held, swept = _held(url)
        return {
            "metrics": _metrics(url),
            "exposition": _exposition(url),
            "a": answers_a,
            "b": answers_b,
            "malformed": malformed,
            "chunks": chunks,
            "log_a": log_a,
            "log_b": log_b,
            "log": read_log(),
            "held": held,
            "swept": swept,
        }


def _outputs(answers: list[dict[str, Any]]) -> list[list[int]]:
    return [a["output_ids"] for a in answers]


def _verify_rounds(answers: list[dict[str, Any]]) -> int:
    return sum(a["meta_info"].get("spec_verify_ct", 0) for a in answers)


@pytest.fixture(scope="module")
def loaded(prompts) -> tuple[dict[str, Any], dict[str, Any]]:
    """The load on a DSPARK_HARVEST server and on the builtin it resolves to, served once."""
    return _serve_load(sc.PLUGIN, prompts), _serve_load("DFLASH", prompts)


def test_load(loaded, prompts):
    plugin, builtin = loaded
    # the same tokens as the builtin, for every completed request
    assert _outputs(plugin["a"]) == _outputs(builtin["a"])
    assert _outputs(plugin["b"]) == _outputs(builtin["b"])
    assert [len(ids) for ids in _outputs(plugin["a"])] == [LOAD_NEW_TOKENS] * len(prompts) + [1] * 3 + [
        LOAD_NEW_TOKENS
    ] * 2
    # malformed requests are refused, by both, and serving goes on
    assert plugin["malformed"] == builtin["malformed"] and all(s >= 400 for s in plugin["malformed"])
    assert all(c >= 1 for c in plugin["chunks"])
    # nothing aborted: the per-round lines add up to sglang's own verify rounds, exactly
    assert _rounds(plugin["log_a"])["request_rounds"] == _verify_rounds(plugin["a"])
    # dropped streams: at least the completed requests' rounds, at most their budgets besides
    got_b, completed_b = _rounds(plugin["log_b"])["request_rounds"], _verify_rounds(plugin["b"])
    assert completed_b <= got_b <= completed_b + 4 * 200
    # nothing left behind: the probe holds no request, and its sweep dropped none
    assert (plugin["held"], plugin["swept"]) == (0.0, 0.0), plugin["log"][-4000:]
    # acceptance by context length: short and long prompts in their buckets, adding up to the total
    metrics = plugin["metrics"]
    by_bucket = {
        b: metrics.get(f'dspark_harvest_context_request_rounds_total{{context="{b}"}}', 0.0)
        for b in ("<=64", "<=128", ">128")
    }
    assert by_bucket["<=64"] > 0 and by_bucket[">128"] > 0, metrics
    assert sum(by_bucket.values()) == metrics["dspark_harvest_request_rounds_total"]
    whole = _rounds(plugin["log"])
    assert whole["alarms_replayed"] == 0 and whole["alarms_logged"] == []
    assert "dspark probe: drafts one position" not in plugin["log"]


def test_the_dashboard_queries_what_a_launch_exports(loaded):
    """Every series each panel of the shipped Grafana dashboard queries (the plugin's and sglang's own),
    parsed with a real PromQL parser, is in the loaded server's ``/metrics``, with every label the query
    groups by, matches on or shows in its legend."""
    from dashboard_queries import misses, queries

    plugin, _ = loaded
    exposition = plugin["exposition"]
    assert "dspark_harvest_host_cost_fraction" in exposition and "sglang:spec_accept_length" in exposition
    assert misses(exposition) == [], exposition[-3000:]
    assert len(queries()) >= 10


def _serve_pressed(algorithm: str, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    overrides = {"max_total_tokens": 640, "max_running_requests": 8}
    # sglang's own retraction test mode (SGLANG_TEST_RETRACT): every few decode steps the scheduler
    # retracts running requests through the same retract_decode path as a full KV pool, and re-queues them
    env = {**ENV, "SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "5"}
    with launch_server(_args(algorithm, overrides), env=env) as (url, read_log, _):
        _wait_ready(read_log)
        start = len(read_log())
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: _generate(url, p, new_tokens), prompts))
        _settled(url, read_log, algorithm)
        held, swept = _held(url)
        return {"answers": answers, "log": read_log()[start:], "held": held, "swept": swept}


RETRACT_NEW_TOKENS = 96


def test_retraction(prompts):
    plugin = _serve_pressed(sc.PLUGIN, prompts, RETRACT_NEW_TOKENS)
    builtin = _serve_pressed("DFLASH", prompts, RETRACT_NEW_TOKENS)
    retracted = re.findall(
        r"Retract\w*[. ]+#retracted_reqs: (\d+)|retraction\. #retracted_reqs: (\d+)", plugin["log"]
    )
    retracted = [int(a or b) for a, b in retracted]
    assert sum(retracted) > 0, plugin["log"][-4000:]  # sglang did retract
    assert _outputs(plugin["answers"]) == _outputs(builtin["answers"])
    assert all(len(ids) == RETRACT_NEW_TOKENS for ids in _outputs(plugin["answers"]))
    group = _rounds(plugin["log"])
    assert group["request_rounds"] == _verify_rounds(plugin["answers"])
    assert (plugin["held"], plugin["swept"]) == (0.0, 0.0)
    assert group["alarms_replayed"] == 0 and group["alarms_logged"] == []
    assert "dspark probe: drafts one position" not in plugin["log"]
