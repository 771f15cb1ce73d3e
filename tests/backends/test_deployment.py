"""Deployments: backends per model (mixed in-process / remote), API keys, retries, affinity keys.

A stub OpenAI-compatible server on loopback stands in for `vllm serve` / `vllm-router`: it
records each request's headers and body and answers with a streamed completion (or with the
error statuses a test queues). Real servers are driven in tests/engines/test_router.py.
"""

import asyncio
import json

import pytest

from mai_graph import (
    BackendError,
    ConfigError,
    MAIContext,
    ScriptedBackend,
    create_mai_graph,
    run,
)
from mai_graph.calls import Question, affinity_key
from mai_graph.cli import EXIT_BACKEND, EXIT_OK, EXIT_USAGE, main
from mai_graph.deploy.select import (
    api_keys_from_env,
    backend_for,
    backends_for,
    backends_from_env,
)
from tests.servers import serving_app

pytest.importorskip("openai", reason="installed with the openai extra")

SECRET = "sk-deploy-secret-0123456789"


class Stub:
    """An OpenAI-compatible chat endpoint: records requests, answers or fails as queued."""

    def __init__(self):
        self.seen: list[tuple[dict, dict]] = []
        self.fail: list[int] = []
        self.answers: dict[str, str] = {}  # served model name -> its every answer

    def app(self):
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        async def chat(request):
            body = await request.json()
            self.seen.append((dict(request.headers), body))
            if self.fail:
                status = self.fail.pop(0)
                return JSONResponse(
                    {"error": {"message": f"stub says {status}", "type": "x", "code": status}},
                    status_code=status,
                )
            choices = ((body.get("structured_outputs") or {}).get("choice")) or ["yes"]
            text = self.answers.get(body["model"], choices[-1])

            async def events():
                for piece in (text, ""):
                    delta = {"content": piece} if piece else {}
                    finish = None if piece else "stop"
                    choice = {"index": 0, "delta": delta, "finish_reason": finish}
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                             "model": body["model"], "choices": [choice]}  # fmt: skip
                    yield f"data: {json.dumps(chunk)}\n\n"
                usage = {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21,
                         "prompt_tokens_details": {"cached_tokens": 16}}  # fmt: skip
                last = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                        "model": body["model"], "choices": [], "usage": usage}  # fmt: skip
                yield f"data: {json.dumps(last)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture
def stub():
    server = Stub()
    with serving_app(server.app()) as url:
        server.url = f"{url}/v1"
        yield server


# -- choosing backends per model ---------------------------------------------------------------


def test_a_url_makes_that_model_remote_and_kinds_override():
    small, large = backends_for("vllm", "s-ckpt", "served-l", urls=(None, "http://h:9/v1"))
    assert (type(small).__name__, type(large).__name__) == ("VLLMBackend", "OpenAIBackend")
    assert str(large.client.base_url) == "http://h:9/v1/"
    small, large = backends_for("openai", "s", "l", kinds=("transformers", None))
    assert type(small).__name__ == "TransformersBackend"
    assert str(large.client.base_url) == "http://127.0.0.1:8001/v1/"  # the default port
    small, large = backends_for("fake", None, "served-l", urls=(None, "http://h:9/v1"))
    assert small.name == "demo-small" and type(large).__name__ == "OpenAIBackend"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: backends_for("vllm", None, "l"), "backend vllm needs both models"),
        (
            lambda: backends_for("fake", None, None, urls=(None, "http://h/v1")),
            "the large model's backend openai needs a model (--large)",
        ),
        (lambda: backends_for("fake", "s", "l", kinds=("gpu", None)), "backend must be one of"),
        (lambda: backend_for("openai", "m", retries=-1), "retries must be an integer >= 0"),
        (
            lambda: backends_from_env(
                {
                    "MAI_GRAPH_LARGE_URL": "http://h/v1",
                    "MAI_GRAPH_LARGE": "l",
                    "MAI_GRAPH_REQUEST_TIMEOUT": "x",
                }
            ),
            "MAI_GRAPH_REQUEST_TIMEOUT must be a number",
        ),  # fmt: skip
        (
            lambda: backends_from_env({"MAI_GRAPH_SMALL_BACKEND": "vllm"}),
            "the small model's backend vllm needs a model (MAI_GRAPH_SMALL)",
        ),
    ],
)
def test_bad_deployments_name_the_setting(call, message):
    with pytest.raises(ConfigError) as err:
        call()
    assert message in str(err.value)


def test_env_configures_each_model_its_key_timeout_and_retries():
    env = {
        "MAI_GRAPH_SMALL_BACKEND": "transformers",
        "MAI_GRAPH_SMALL": "/models/small",
        "MAI_GRAPH_LARGE_URL": "http://10.1.2.3:8000/v1",
        "MAI_GRAPH_LARGE": "Qwen/Qwen3-VL-8B-Instruct",
        "MAI_GRAPH_LARGE_API_KEY": SECRET,
        "MAI_GRAPH_REQUEST_TIMEOUT": "42",
        "MAI_GRAPH_REQUEST_RETRIES": "3",
    }
    small, large = backends_from_env(env)
    assert type(small).__name__ == "TransformersBackend"
    assert large.model == "Qwen/Qwen3-VL-8B-Instruct" and large.client.api_key == SECRET
    assert large.client.max_retries == 3 and large.timeout_s == 42
    assert SECRET not in repr(large)
    assert api_keys_from_env(env) == (None, SECRET)


# -- mixed runs against a remote server --------------------------------------------------------


@pytest.mark.server
def test_small_in_process_large_remote_with_its_key_and_one_affinity_key_per_run(stub, png):
    small = ScriptedBackend({"short": "A", "cot": "so it is A", "s2": "A"}, name="small")
    _, large = backends_for(
        "fake", None, "served-large", urls=(None, stub.url), api_keys=(None, SECRET)
    )
    result = run("Which colour?", png, small=small, large=large, options=["red", "blue"])
    assert result.route == "transfer"  # the stub answers the last choice: B, not A
    calls = [m for m in result.metrics if m["role"] == "large"]
    assert [m["node"] for m in calls] == ["verify", "answer"]
    assert calls[0]["cached_tokens"] == 16
    headers = [h for h, _ in stub.seen]
    assert {h["authorization"] for h in headers} == {f"Bearer {SECRET}"}
    keys = {h["x-session-id"] for h in headers} | {r.affinity_key for r in small.requests}
    assert len(keys) == 1  # every call of the run, local and remote, carries one key
    run("Which shape?", png, small=small, large=large, options=["red", "blue"])
    assert stub.seen[-1][0]["x-session-id"] not in keys  # another question, another key


@pytest.mark.server
def test_cli_mixes_per_model_flags_and_reads_keys_from_env(stub, monkeypatch, capsys):
    monkeypatch.setenv("MAI_GRAPH_LARGE_API_KEY", SECRET)
    argv = ["run", "Is it red?", "--large-url", stub.url, "--large", "served-large", "--json",
            "--request-retries", "0", "--request-timeout", "30"]  # fmt: skip
    assert main(argv) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"][0]["model"] in ("demo-small", "served-large")
    assert stub.seen and stub.seen[0][0]["authorization"] == f"Bearer {SECRET}"
    assert stub.seen[0][1]["model"] == "served-large"
    assert (
        main(["run", "q", "--small-backend", "vllm", "--large-url", stub.url, "--large", "l"])
        == EXIT_USAGE
    )
    assert "the small model's backend vllm needs a model (--small)" in capsys.readouterr().err


@pytest.mark.server
def test_cli_runs_drafters_and_a_chain_of_remote_models(stub, capsys):
    stub.answers = {"s1": "no", "s2": "no", "l1": "yes", "l2": "yes"}
    argv = ["run", "Is it red?", "--backend", "openai", "--small-url", stub.url, "--large-url",
            stub.url, "--small", "s1", "--drafter", "s2", "--large", "l1", "--larger", "l2",
            "--json", "--request-retries", "0", "--set", "sparsify=relevance"]  # fmt: skip
    assert main(argv) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    served = [body["model"] for _, body in stub.seen]
    assert set(served) == {"s1", "s2", "l1", "l2"}  # both drafters, both stages
    assert {m["model"] for m in out["metrics"]} == {"s1", "s2", "l1", "l2"}
    assert out["canonical"] == "yes"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--drafter", "x"], "--drafter needs real models"),
        (["--backend", "openai", "--small", "a", "--large", "b", "--larger", "b"],
         "two models of this lineup share a name"),
    ],
)  # fmt: skip
def test_cli_refuses_fake_drafters_and_repeated_models(argv, message, capsys):
    assert main(["run", "q", *argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_env_names_drafters_and_a_chain_for_studio():
    env = {"MAI_GRAPH_BACKEND": "openai", "MAI_GRAPH_SMALL": "s1", "MAI_GRAPH_LARGE": "l1",
           "MAI_GRAPH_DRAFTERS": "s2, s3", "MAI_GRAPH_LARGER": "l2",
           "MAI_GRAPH_LARGE_URL": "http://10.0.0.5:8001/v1"}  # fmt: skip
    small, large = backends_from_env(env)
    assert [b.name for b in small] == ["s1", "s2", "s3"]
    assert [b.name for b in large] == ["l1", "l2"]
    assert all("10.0.0.5" in str(b.client.base_url) for b in large)
    assert all("127.0.0.1:8000" in str(b.client.base_url) for b in small)
    graph = create_mai_graph(small, large).compile()
    assert "escalate_2" in graph.nodes  # the chain's stage 2, unrolled
    with pytest.raises(ConfigError, match="MAI_GRAPH_LARGER needs real models"):
        backends_from_env({"MAI_GRAPH_LARGER": "l2"})


def test_profile_offers_no_lineup_flags():
    from mai_graph.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["profile", "--larger", "x"])


# -- retries and errors ------------------------------------------------------------------------


def request(purpose="short"):
    from mai_graph import GenerationRequest

    return GenerationRequest(
        ({"role": "user", "content": [{"type": "text", "text": "Is it?"}]},),
        max_tokens=4,
        purpose=purpose,
        affinity_key="mai-abc",
    )


@pytest.mark.server
@pytest.mark.parametrize("status", [503, 429, 500])
def test_transient_statuses_are_retried_within_the_bound(stub, status):
    async def go():
        backend = backend_for("openai", "served", url=stub.url, retries=2)
        stub.fail = [status, status]
        gen = await backend.generate(request())
        assert gen.text == "yes" and len(stub.seen) == 3
        stub.fail = [status] * 3
        with pytest.raises(BackendError) as err:
            await backend.generate(request())
        assert err.value.transient and len(stub.seen) == 6  # 1 + 2 retries, then give up

    asyncio.run(go())


@pytest.mark.server
@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried_and_never_show_the_key(stub, status):
    backend = backend_for("openai", "served", url=stub.url, api_key=SECRET, retries=2)
    stub.fail = [status]
    with pytest.raises(BackendError) as err:
        asyncio.run(backend.generate(request()))
    assert not err.value.transient and len(stub.seen) == 1
    assert SECRET not in str(err.value) and SECRET not in repr(err.value.__cause__)
    assert f"stub says {status}" in str(err.value)


# -- the affinity key --------------------------------------------------------------------------


def test_every_call_of_a_run_carries_the_same_affinity_key(png):
    small = ScriptedBackend({"short": "A", "cot": "so A", "s2": "A"}, name="small")
    large = ScriptedBackend({"short": "B", "answer": "A"}, name="large")
    context = MAIContext(speculative_cot=True)
    first = run("Which?", png, small=small, large=large, options=["x", "y"], context=context)
    assert first.route == "transfer"
    keys = {r.affinity_key for r in small.requests + large.requests}
    assert len(keys) == 1 and next(iter(keys)).startswith("mai-")
    run("Which?", png, small=small, large=large, options=["x", "y"])
    assert {r.affinity_key for r in small.requests + large.requests} == keys  # same prompt prefix
    q = Question(question="Which?", image=None, options={"A": "x", "B": "y"}, kind="choice")
    other = Question(question="Which?", image=None, options={"A": "x", "B": "z"}, kind="choice")
    assert affinity_key(q) != affinity_key(other)


def test_openai_backend_sends_the_key_as_the_routers_session_header():
    from mai_graph.backends.openai import OpenAIBackend

    backend = backend_for("openai", "served", url="http://h/v1")
    assert backend.body(request())["extra_headers"] == {"X-Session-ID": "mai-abc"}
    quiet = OpenAIBackend(backend.client, "served", affinity_header=None)
    assert "extra_headers" not in quiet.body(request())


@pytest.mark.server  # a server that is down: a closed loopback port
def test_cli_refuses_a_bad_timeout_and_an_unreachable_server_is_a_backend_failure(capsys):
    from tests.servers import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    argv = ["run", "q", "--large-url", url, "--large", "l", "--request-retries", "0"]
    assert main(argv) == EXIT_BACKEND
    assert "unreachable" in capsys.readouterr().err
    assert main([*argv, "--request-timeout", "-1"]) == EXIT_USAGE
