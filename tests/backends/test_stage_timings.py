"""The engines' own stage timings (queue, prefill, decode, image tokens) through the doors.

Each backend's source of them is tested where it lives: vLLM's request statistics and the
transformers backend's own steps on the tiny pairs (``tests/engines/test_tracing_on_engines.py``),
``vllm serve --enable-per-request-metrics`` on a real server
(``tests/engines/test_openai_server.py``); here the parsing, the records, the run's call
table, eval's report per route and the latency fit, on the fakes.
"""

from __future__ import annotations

import json
import math

import pytest

from mai_graph import Generation, ScriptedBackend, run
from mai_graph.backends.openai import served_stage_times
from mai_graph.backends.vllm.translate import stage_times
from mai_graph.cli import EXIT_OK, main
from mai_graph.latency.profile import engine_seconds

OPTIONS = ["red", "blue", "green"]


def test_every_call_record_carries_the_stages_and_image_tokens(png):
    small = ScriptedBackend(
        {"short": "A", "cot": "so it is red", "s2": "B"}, name="s", latency=0.01
    )
    large = ScriptedBackend({"short": "C", "answer": "B"}, name="l", latency=0.01)
    result = run("Which colour?", str(png), options=OPTIONS, small=small, large=large)
    assert result.route == "transfer" and len(result.metrics) == 5
    for m in result.metrics:
        assert m["queue_s"] == 0.0 and m["decode_s"] == 0.0
        assert m["prefill_s"] == pytest.approx(m["latency_s"])
        assert m["image_tokens"] == 64  # the fakes' tokens per image
    table = result.format()
    assert "queue" in table and "prefill" in table and "decode" in table and "img" in table


def test_the_run_command_prints_the_stage_columns(capsys):
    assert main(["run", "Which colour?", "--option", "red", "--option", "blue", "-v"]) == EXIT_OK
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.strip().startswith("node"))
    assert header.split()[-5:] == ["ttft", "queue", "prefill", "decode", "p"]
    assert " img " in header


@pytest.mark.parametrize(
    "metrics, expected",
    [
        ({"queue_time_ms": 2, "time_to_first_token_ms": 40.5, "generation_time_ms": 100},
         (0.002, 0.0405, 0.1)),
        ({}, (None, None, None)),
        (None, (None, None, None)),
        ("queue_time_ms=2", (None, None, None)),
        ([1, 2, 3], (None, None, None)),
        ({"queue_time_ms": "2"}, (None, None, None)),
        ({"queue_time_ms": -1}, (None, None, None)),
        ({"queue_time_ms": float("nan")}, (None, None, None)),
        ({"queue_time_ms": float("inf")}, (None, None, None)),
        ({"queue_time_ms": True}, (None, None, None)),
        ({"queue_time_ms": None, "generation_time_ms": 0}, (None, None, 0.0)),
        ({"time_to_first_token_ms": 10**30}, (None, 2.0, None)),  # held to the call's time
        ({"queue_time_ms": 10**400}, (None, None, None)),  # beyond any float
        ({"queue_time_ms": -0.0, "generation_time_ms": 1500}, (0.0, None, 1.5)),
    ],
)  # fmt: skip
def test_served_stage_times_read_only_sane_numbers(metrics, expected):
    got = served_stage_times(metrics, latency_s=2.0)
    assert (got["queue_s"], got["prefill_s"], got["decode_s"]) == expected


@pytest.mark.parametrize(
    "details, expected",
    [
        ({"cached_tokens": 3, "multimodal_tokens": {"image": 256}}, 256),
        ({"multimodal_tokens": {"image": 16, "video": 64}}, 80),
        ({"cached_tokens": 3}, None),
        ({"multimodal_tokens": {"image": "256"}}, None),
        ({"multimodal_tokens": {"image": -1}}, None),
        ({"multimodal_tokens": [256]}, None),
        ({"multimodal_tokens": {"image": True}}, None),
    ],
)
def test_image_tokens_from_a_servers_usage_details(details, expected):
    """vLLM's ``prompt_tokens_details.multimodal_tokens``, read as the client library hands it."""
    from openai.types.completion_usage import PromptTokensDetails

    from mai_graph.backends.openai import _media_tokens

    assert _media_tokens(PromptTokensDetails.model_validate(details)) == expected
    assert _media_tokens(None) is None


class Stats:
    def __init__(self, queued=0.0, scheduled=0.0, first=0.0, last=0.0):
        self.queued_ts, self.scheduled_ts = queued, scheduled
        self.first_token_ts, self.last_token_ts = first, last


@pytest.mark.parametrize(
    "stats, expected",
    [
        (Stats(10.0, 10.5, 11.0, 13.0), (0.5, 0.5, 2.0)),
        (Stats(10.0, 10.5, 11.0, 11.0), (0.5, 0.5, 0.0)),  # one token: no decode steps
        (Stats(), (None, None, None)),  # statistics off: all zero
        (None, (None, None, None)),
        (Stats(10.0, 0.0, 11.0, 12.0), (None, None, 1.0)),  # never scheduled (aborted early)
        (Stats(10.0, 9.0, 11.0, 12.0), (0.0, 2.0, 1.0)),  # clocks out of order: not negative
    ],
)  # fmt: skip
def test_vllm_request_statistics_become_stages(stats, expected):
    got = stage_times(stats)
    assert (got["queue_s"], got["prefill_s"], got["decode_s"]) == expected


def test_the_latency_fit_takes_the_queueing_out_of_a_calls_time():
    assert engine_seconds(Generation("x", "m", 10, 2, 1.0, queue_s=0.25)) == 0.75
    assert engine_seconds(Generation("x", "m", 10, 2, 1.0)) == 1.0
    assert engine_seconds(Generation("x", "m", 10, 2, 0.1, queue_s=0.5)) == 0.0


def test_eval_reports_the_stages_per_route(tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["synth-data", str(data), "--n", "24", "--seed", "3"]) == EXIT_OK
    out = tmp_path / "eval"
    assert main(["eval", "--data", str(data / "data.jsonl"), "--backend", "simulated",
                 "--out", str(out), "--no-progress", "--no-plots"]) == EXIT_OK  # fmt: skip
    printed = capsys.readouterr().out
    assert "per route, engine stages" in printed
    report = json.loads((out / "report.json").read_text())
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    calls = [r for r in records if r.get("type") == "call"]
    assert calls and all(c["prefill_s"] is not None and c["queue_s"] == 0.0 for c in calls)
    for policy, summary in report["policies"].items():
        for route, r in summary["routes"].items():
            stages = r["stages_s"]
            assert stages is not None, (policy, route)
            assert stages["prefill_s"] > 0 and stages["queue_s"] == 0.0
            assert math.isfinite(stages["decode_s"])
    assert "queue ms" in (out / "report.md").read_text()
