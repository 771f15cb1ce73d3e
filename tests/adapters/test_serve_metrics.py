"""The endpoint's `GET /metrics`: live gate health, scraped after a burst of real requests.

The app runs in process, without a socket (as in the endpoint's tests, tests/adapters/); the
`openai` client sends the burst, the app's test client scrapes, and `prometheus_client`'s own
parser reads the text. A client that leaves and the `mai-graph serve` command need a real
server (uvicorn on a free loopback port; marked `server`).
Fake backends decide the routes, so every count is exact and every token sum can be checked
against what the responses said.
"""

import asyncio
import json
import math
import time
from collections import Counter, defaultdict

import httpx
import pytest

from mai_graph import BackendError, FunctionBackend, ScriptedBackend
from mai_graph.adapters.endpoint.app import create_app
from mai_graph.adapters.endpoint.metrics import LATENCY_BUCKETS, ServeMetrics
from tests.servers import in_process as running
from tests.servers import serving_app

openai = pytest.importorskip("openai", reason="installed with the openai extra")
pytest.importorskip("uvicorn", reason="installed with the serve extra")
parser = pytest.importorskip("prometheus_client.parser", reason="installed with the serve extra")

KEY = "sk-test-metrics-key"
OPTIONS = ["red", "blue", "green"]


def backends():
    """A pair whose route follows the question: ``case=agree`` ends at verification,
    ``case=transfer`` disagrees and transfers, ``case=fail`` finds the large model down.
    Named by checkpoint paths, which the metrics must never show."""

    def large(request):
        text = json.dumps(request.messages)
        if "case=fail" in text:
            raise BackendError("/srv/models/8b: server unreachable or busy", transient=True)
        if request.purpose == "short":
            return "A" if "case=agree" in text else "B"
        return "A"

    small = ScriptedBackend(
        {"short": "A", "cot": "The big square is red so the answer is A", "s2": "A"},
        name="/srv/models/2b",
    )
    return small, FunctionBackend(large, name="/srv/models/8b")


def messages(kind, i):
    return [{"role": "user", "content": f"Question {i} case={kind}: which colour is the square?"}]


def scrape(served, key=KEY):
    """GET /metrics of an app in process, or of a real server's URL."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if isinstance(served, str):
        return httpx.get(f"{served}/metrics", headers=headers, timeout=10)
    return served.client.get("/metrics", headers=headers)


def samples(text):
    """{(sample name, sorted labels): value} of a scrape."""
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(scraped, name, **labels):
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


async def burst(served):
    """Agreeing, transferring, baseline and failing runs, streamed and not, concurrently; a
    bad request and a wrong key. Returns the ``mai`` and ``usage`` of every answered run."""
    async with served.async_openai(KEY) as c:

        async def ask(kind, i, stream, **extra):
            body = {"mai": {"options": OPTIONS, **extra}}
            if not stream:
                out = await c.chat.completions.create(
                    model="mai", messages=messages(kind, i), extra_body=body
                )
                return out.model_extra["mai"], out.usage.model_dump()
            chunks = [
                ch
                async for ch in await c.chat.completions.create(
                    model="mai", messages=messages(kind, i), extra_body=body, stream=True,
                    stream_options={"include_usage": True},
                )
            ]  # fmt: skip
            finish = next(ch for ch in chunks if ch.choices and ch.choices[0].finish_reason)
            return finish.model_extra["mai"], chunks[-1].usage.model_dump()

        asks = [ask("agree", i, stream=i % 2 == 0) for i in range(6)]
        asks += [ask("transfer", i, stream=i % 2 == 1) for i in range(6, 10)]
        asks += [ask("baseline", 10, stream=False, policy="large")]
        answered = await asyncio.gather(*asks)
        with pytest.raises(openai.BadRequestError):
            await c.chat.completions.create(model="mai", messages=messages("agree", 11), n=2)
        with pytest.raises(openai.InternalServerError):
            await c.chat.completions.create(model="mai", messages=messages("fail", 12))
        with pytest.raises(openai.APIError, match="unreachable"):
            stream = await c.chat.completions.create(
                model="mai", messages=messages("fail", 13), stream=True
            )
            async for _ in stream:
                pass
    async with served.async_openai("wrong") as c:
        with pytest.raises(openai.AuthenticationError):
            await c.chat.completions.create(model="mai", messages=messages("agree", 14))
    return answered


def test_metrics_after_a_burst_count_what_the_responses_said():
    small, large = backends()
    app = create_app(small, large, api_keys=[KEY], retry_policy=None)
    with running(app) as endpoint:
        before = samples(scrape(endpoint).text)
        answered = asyncio.run(burst(endpoint))
        reply = scrape(endpoint)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    text = reply.text
    print(text)  # docs/observability.md shows this scrape (pytest -s)
    got = samples(text)
    assert math.isnan(value(before, "mai_early_exit_share"))  # no run yet

    routes = Counter(mai["route"] for mai, _ in answered)
    assert routes == {"agree": 6, "transfer": 4, "large": 1}
    for route, n in routes.items():
        assert value(got, "mai_runs_total", route=route) == n
        assert value(got, "mai_run_latency_seconds_count", route=route) == n
        walls = sum(mai["wall_s"] for mai, _ in answered if mai["route"] == route)
        assert value(got, "mai_run_latency_seconds_sum", route=route) == pytest.approx(walls)
        assert value(got, "mai_run_latency_seconds_bucket", route=route, le="+Inf") == n
    bounds = {float(dict(k[1])["le"]) for k in got if k[0] == "mai_run_latency_seconds_bucket"}
    assert bounds == {*LATENCY_BUCKETS, math.inf}

    # Six of the ten runs MAI decided ended at verification; the baseline run is not counted.
    assert value(got, "mai_early_exit_share") == pytest.approx(6 / 10)
    assert value(got, "mai_runs_in_flight") == 0

    tokens, calls = defaultdict(float), Counter()
    for mai, _ in answered:
        for m in mai["metrics"]:
            tokens[m["model"], "prompt"] += m["prompt_tokens"]
            tokens[m["model"], "cached"] += m["cached_tokens"] or 0
            tokens[m["model"], "generated"] += m["generated_tokens"]
            calls[m["model"], m["node"]] += 1
    assert {model for model, _ in tokens} == {"mai/small", "mai/large"}
    for (model, kind), n in tokens.items():
        assert value(got, "mai_model_tokens_total", model=model, kind=kind) == n
    for (model, node), n in calls.items():
        assert value(got, "mai_model_calls_total", model=model, node=node) == n
    assert calls["mai/large", "answer"] == 4 and calls["mai/small", "reason"] == 4
    # ... and the token counters add up to the responses' usage.
    for kind, field in (("prompt", "prompt_tokens"), ("generated", "completion_tokens")):
        total = sum(u[field] for _, u in answered)
        assert sum(n for (_, k), n in tokens.items() if k == kind) == total
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for _, u in answered)
    assert sum(n for (_, k), n in tokens.items() if k == "cached") == cached > 0

    assert value(got, "mai_requests_total", outcome="answered", status="200") == 11
    assert value(got, "mai_requests_total", outcome="refused", status="400") == 1
    assert value(got, "mai_requests_total", outcome="refused", status="401") == 1
    assert value(got, "mai_requests_total", outcome="failed", status="503") == 2  # both doors
    # Labels come from fixed sets: no question text, no checkpoint path.
    assert "/srv/models" not in text and "Question" not in text and "case=" not in text


def test_metrics_follow_the_access_rule_with_keys():
    small, large = backends()
    with running(create_app(small, large, api_keys=["other-key", KEY])) as endpoint:
        missing, wrong = scrape(endpoint, key=None), scrape(endpoint, key="wrong")
        right = scrape(endpoint)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert wrong.status_code == 401 and KEY not in wrong.text
    assert right.status_code == 200 and "mai_runs_total" in right.text


def test_without_keys_metrics_are_open_and_the_server_keeps_to_loopback(capsys, monkeypatch):
    """Without a key the endpoint's rule is loopback only: the app asks for no key (as on its
    other routes) and `mai-graph serve` refuses to listen anywhere else."""
    from mai_graph.cli import EXIT_USAGE, main

    small, large = backends()
    with running(create_app(small, large)) as endpoint:
        assert scrape(endpoint, key=None).status_code == 200
    monkeypatch.delenv("MAI_GRAPH_SERVE_API_KEY", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == EXIT_USAGE
    assert "without an API key" in capsys.readouterr().err


def test_each_app_counts_its_own_runs():
    """Apps in one process keep apart (their own registries, not the process-wide one)."""
    import prometheus_client

    first, second = create_app(*backends()), create_app(*backends())
    with running(first) as app_1, running(second) as app_2:
        with app_1.openai() as c:
            c.chat.completions.create(
                model="mai", messages=messages("agree", 0), extra_body={"mai": {"options": OPTIONS}}
            )
        one, two = samples(scrape(app_1).text), samples(scrape(app_2).text)
    assert value(one, "mai_runs_total", route="agree") == 1
    assert value(two, "mai_runs_total", route="agree") == 0
    assert b"mai_runs_total" not in prometheus_client.generate_latest()


@pytest.mark.server
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_is_counted_as_cancelled(stream):
    async def slow(request):
        await asyncio.sleep(6.0)
        return "A"

    app = create_app(FunctionBackend(slow, name="small"), FunctionBackend(slow, name="large"))
    with serving_app(app) as url:
        if stream:  # the role chunk, then the client goes
            body = {"model": "mai", "messages": messages("agree", 0), "stream": True}
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
                assert next(resp.iter_lines()).startswith("data: ")
        else:
            impatient = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=0.5)
            with impatient as c, pytest.raises(openai.APITimeoutError):
                c.chat.completions.create(model="mai", messages=messages("agree", 0))
        deadline = time.monotonic() + 5
        while True:
            got = samples(scrape(url).text)
            if value(got, "mai_requests_total", outcome="cancelled", status="499") == 1:
                break
            assert time.monotonic() < deadline, "the abandoned run was never counted"
            time.sleep(0.05)
    assert value(got, "mai_runs_in_flight") == 0
    assert value(got, "mai_runs_total", route="agree") == 0


@pytest.mark.server
def test_the_serve_command_serves_metrics(tmp_path):
    """A real `mai-graph serve` process (its default fake pair): one run, one scrape."""
    import os
    import sys

    from tests.servers import free_port, serving

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(port)]
    env = {**os.environ, "MAI_GRAPH_SERVE_API_KEY": KEY}
    with serving(cmd, f"{url}/health", tmp_path / "serve.log", env=env, timeout=60):
        with openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as c:
            out = c.chat.completions.create(model="mai", messages=messages("agree", 0))
        assert scrape(url, key=None).status_code == 401
        got = samples(scrape(url).text)
    route = out.model_extra["mai"]["route"]
    assert value(got, "mai_runs_total", route=route) == 1
    generated = value(got, "mai_model_tokens_total", model="mai/small", kind="generated")
    generated += value(got, "mai_model_tokens_total", model="mai/large", kind="generated")
    assert generated == out.usage.completion_tokens


def test_recording_is_cheap():
    """One transfer run's record (five calls) costs microseconds, not milliseconds."""
    record = {"model": "mai/small", "node": "verify", "prompt_tokens": 120, "cached_tokens": 64,
              "generated_tokens": 1, "latency_s": 0.03}  # fmt: skip
    mai = {
        "route": "transfer",
        "wall_s": 1.2,
        "metrics": [
            record,
            {**record, "model": "mai/large"},
            {**record, "node": "reason", "generated_tokens": 256},
            {**record, "node": "extract"},
            {**record, "model": "mai/large", "node": "answer"},
        ],
    }
    m = ServeMetrics()
    m.finished(mai)
    runs = 10_000
    start = time.perf_counter()
    for _ in range(runs):
        m.finished(mai)
    per_run = (time.perf_counter() - start) / runs
    start = time.perf_counter()
    for _ in range(100):
        m.scrape()
    per_scrape = (time.perf_counter() - start) / 100
    print(f"recording one transfer run: {per_run * 1e6:.1f} µs; one scrape: "
          f"{per_scrape * 1e6:.0f} µs")  # fmt: skip
    assert per_run < 1e-3, f"recording one run took {per_run * 1e6:.0f} µs"
