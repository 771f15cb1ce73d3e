"""LangGraph Studio: the served graph starts no engine, and a real `langgraph dev` serves it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mai_graph import ConfigError
from mai_graph.deploy.select import backends_from_env
from tests.servers import free_port, serving

ROOT = Path(__file__).resolve().parents[2]


def test_langgraph_json_names_the_studio_graph():
    spec = json.loads((ROOT / "langgraph.json").read_text())
    import importlib

    for graph_id, target in spec["graphs"].items():
        path, name = target.split(":")
        assert (ROOT / path).is_file(), graph_id
        assert callable(getattr(importlib.import_module("mai_graph.adapters.studio"), name)), (
            graph_id
        )


@pytest.mark.slow
def test_env_selects_backends_without_starting_engines():
    small, large = backends_from_env({})
    assert small.name == "demo-small"
    code = (
        "import sys, mai_graph.adapters.studio as s; g = s.graph; g.get_context_jsonschema();"
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


@pytest.fixture(scope="module")
def studio_images(tmp_path_factory):
    """An allowed image root with one picture, and a picture outside it."""
    from PIL import Image

    base = tmp_path_factory.mktemp("studio-images")
    (base / "allowed").mkdir()
    Image.new("RGB", (64, 48), (20, 160, 30)).save(base / "allowed" / "green.png")
    Image.new("RGB", (64, 48), (20, 160, 30)).save(base / "private.png")
    return base


@pytest.fixture(scope="module")
def server(tmp_path_factory, studio_images):
    cli = Path(sys.executable).parent / "langgraph"
    if not cli.exists() and not shutil.which("langgraph"):
        pytest.skip("langgraph-cli is installed with the studio extra")
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true",
           "MAI_GRAPH_BACKEND": "fake", "MAI_GRAPH_IMAGE_ROOTS": str(studio_images / "allowed"),
           "MAI_GRAPH_IMAGE_DIR": str(studio_images / "store")}  # fmt: skip
    env.pop("LANGGRAPH_ALLOW_BLOCKING", None)
    # No --allow-blocking: the dev server fails any run that blocks its event loop.
    cmd = [str(cli) if cli.exists() else "langgraph", "dev", "--no-browser", "--no-reload",
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("studio") / "server.log"
    with serving(cmd, f"{base}/ok", log, env=env, cwd=ROOT, timeout=90):
        yield base
    text = log.read_text()
    assert "BlockingError" not in text and "blocking call" not in text.lower(), text[-3000:]


@pytest.fixture(scope="module")
def client(server):
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=server)


@pytest.fixture(scope="module")
def assistant_id(client):
    (assistant,) = client.assistants.search(graph_id="mai")
    return assistant["assistant_id"]


@pytest.mark.server
def test_studio_api_serves_the_graph(client, assistant_id):
    schemas = client.assistants.get_schemas(assistant_id)
    props = schemas["input_schema"]["properties"]
    assert {"question", "image", "options"} <= set(props)
    assert "data URL" in props["image"]["description"] and "base64" in props["image"]["description"]
    assert "route" in schemas["output_schema"]["properties"]
    context = schemas["context_schema"]["properties"]
    assert context["policy"]["enum"] == ["mai", "small", "large", "small_cot", "large_cot"]
    assert context["keep_ratio"]["default"] == 0.2

    out = client.runs.wait(None, assistant_id, input={"question": "Which colour?",
                           "options": ["red", "blue"]}, context={"keep_ratio": 0.3})  # fmt: skip
    assert out["route"] in ("agree", "extract_agree", "transfer")
    assert out["canonical"] in ("A", "B") and out["metrics"]

    parts = list(client.runs.stream(None, assistant_id, input={"question": "Is the square red?"},
                                    stream_mode=["updates", "custom"]))  # fmt: skip
    events = [part.event for part in parts]
    assert "updates" in events and "custom" in events
    assert events[0] == "metadata"


def _image_run(client, assistant_id, image):
    """(the image reference the run recorded, or None; the error, or None)."""
    thread = client.threads.create()
    out = client.runs.wait(thread["thread_id"], assistant_id,
                           input={"question": "Is the square green?", "image": image},
                           raise_error=False)  # fmt: skip
    if "__error__" in out:
        return None, out["__error__"]
    state = client.threads.get_state(thread["thread_id"])
    return state["values"]["asked"]["image"], None


@pytest.mark.server
def test_studio_images_inline_or_under_the_allowed_roots(client, assistant_id, studio_images):
    import base64

    data = (studio_images / "allowed" / "green.png").read_bytes()
    b64 = base64.b64encode(data).decode()
    by_url, err = _image_run(client, assistant_id, "data:image/png;base64," + b64)
    assert err is None, err
    by_b64, err = _image_run(client, assistant_id, b64)
    assert err is None, err
    by_path, err = _image_run(client, assistant_id, str(studio_images / "allowed" / "green.png"))
    assert err is None, err
    assert by_url["sha256"] == by_b64["sha256"] == by_path["sha256"]
    assert (by_url["width"], by_url["height"]) == (64, 48)


@pytest.mark.server
def test_studio_refuses_server_paths_without_an_existence_oracle(
    client, assistant_id, studio_images
):
    refused = [
        str(studio_images / "private.png"),  # exists, outside the root
        str(studio_images / "missing.png"),  # does not exist
        str(studio_images / "allowed" / ".." / "private.png"),
        "/etc/passwd",
        "~/.bashrc",
        "file:///etc/hostname",
    ]
    messages = set()
    for source in refused:
        ref, err = _image_run(client, assistant_id, source)
        assert ref is None and err["error"] == "ImageAccessError", (source, err)
        messages.add(err["message"].replace(source, "<given>"))
    assert len(messages) == 1, messages
    assert "not found" not in messages.pop()

    # The chat graph reads images off messages under the same policy.
    (chat,) = client.assistants.search(graph_id="mai_chat")
    for source in refused[:2]:
        image = {"type": "image_url", "image_url": {"url": source}}
        message = {"role": "user", "content": [{"type": "text", "text": "Green?"}, image]}
        out = client.runs.wait(None, chat["assistant_id"], input={"messages": [message]},
                               raise_error=False)  # fmt: skip
        assert out["__error__"]["error"] == "ImageAccessError", out
