"""LangGraph Studio: the served graph starts no engine, and a real `langgraph dev` serves it."""

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from mai_graph import ConfigError
from mai_graph.backends.select import backends_from_env
from tests.servers import free_port, serving

ROOT = Path(__file__).resolve().parents[1]


def test_langgraph_json_names_the_studio_graph():
    spec = json.loads((ROOT / "langgraph.json").read_text())
    path, variable = spec["graphs"]["mai"].split(":")
    assert (ROOT / path).is_file() and variable == "graph"


def test_env_selects_backends_without_starting_engines():
    small, large = backends_from_env({})
    assert small.name == "demo-small"
    code = (
        "import sys, mai_graph.studio as s; g = s.graph; g.get_context_jsonschema();"
        "print(type(g.builder.nodes['verify'].runnable).__name__,"
        " [m for m in ('vllm', 'torch') if m in sys.modules])"
    )
    env = {
        **os.environ,
        "MAI_GRAPH_BACKEND": "vllm",
        "MAI_GRAPH_SMALL": "/x/s",
        "MAI_GRAPH_LARGE": "/x/l",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split(None, 1)[1].strip() == "[]"  # neither vLLM nor torch was imported
    with pytest.raises(ConfigError, match="MAI_GRAPH_BACKEND: backend must be one of"):
        backends_from_env({"MAI_GRAPH_BACKEND": "gpu"})
    with pytest.raises(ConfigError, match="needs both models .MAI_GRAPH_SMALL/MAI_GRAPH_LARGE"):
        backends_from_env({"MAI_GRAPH_BACKEND": "transformers"})


def _call(url, payload=None, method=None):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"),
                                 headers={"content-type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read().decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cli = Path(sys.executable).parent / "langgraph"
    if not cli.exists() and not shutil.which("langgraph"):
        pytest.skip("langgraph-cli is installed with the studio extra")
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true",
           "MAI_GRAPH_BACKEND": "fake"}  # fmt: skip
    cmd = [str(cli) if cli.exists() else "langgraph", "dev", "--no-browser", "--no-reload",
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("studio") / "server.log"
    with serving(cmd, f"{base}/ok", log, env=env, cwd=ROOT, timeout=90):
        yield base


@pytest.mark.server
def test_studio_api_serves_the_graph(server):
    (assistant,) = json.loads(_call(f"{server}/assistants/search", {"graph_id": "mai"}))
    aid = assistant["assistant_id"]
    schemas = json.loads(_call(f"{server}/assistants/{aid}/schemas"))
    assert set(schemas["input_schema"]["properties"]) == {"question", "image", "options"}
    assert "route" in schemas["output_schema"]["properties"]
    context = schemas["context_schema"]["properties"]
    assert context["policy"]["enum"] == ["mai", "small", "large", "small_cot", "large_cot"]
    assert context["keep_ratio"]["default"] == 0.2

    body = {"assistant_id": aid, "input": {"question": "Which colour?", "options": ["red", "blue"]},
            "context": {"keep_ratio": 0.3}}  # fmt: skip
    out = json.loads(_call(f"{server}/runs/wait", body))
    assert out["route"] in ("agree", "extract_agree", "transfer")
    assert out["canonical"] in ("A", "B") and out["metrics"]

    body = {"assistant_id": aid, "input": {"question": "Is the square red?"},
            "stream_mode": ["updates", "custom"]}  # fmt: skip
    lines = _call(f"{server}/runs/stream", body).splitlines()
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert "updates" in events and "custom" in events
    assert events[0] == "metadata"
