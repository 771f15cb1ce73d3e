"""The served graph on real engines under `langgraph dev` without `--allow-blocking`.

The server's blocking-call detector watches every thread's event loop, mai-graph's engine loop
included: engine start, processor loading, prompt rendering and image decoding must all run off
the loops. One run per engine kind, with a data-URL image, through the official SDK.
"""

import base64
import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.servers import free_port, serving

pytestmark = [pytest.mark.engine, pytest.mark.server]
ROOT = Path(__file__).resolve().parents[2]


def _data_url() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (96, 64), (200, 30, 30)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("kind", ["transformers", "vllm"])
async def test_a_served_run_on_real_engines_never_blocks_a_loop(kind, tiny_pair, tmp_path):
    from langgraph_sdk import get_client

    if kind == "vllm":
        pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    cli = Path(sys.executable).parent / "langgraph"
    if not cli.exists() and not shutil.which("langgraph"):
        pytest.skip("langgraph-cli is installed with the studio extra")
    small, large = (str(p) for p in tiny_pair)
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true",
           "MAI_GRAPH_BACKEND": kind, "MAI_GRAPH_SMALL": small, "MAI_GRAPH_LARGE": large,
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [str(cli) if cli.exists() else "langgraph", "dev", "--no-browser", "--no-reload",
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    log = tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    with serving(cmd, f"{base}/ok", log, env=env, cwd=ROOT, timeout=120):
        client = get_client(url=base, timeout=600)
        out = await client.runs.wait(
            None,
            "mai",
            input={"question": "Is the square red?", "image": _data_url()},
            context={"cot_max_tokens": 16, "short_max_tokens": 4, "s2_max_tokens": 4},
            raise_error=True,
        )
        assert out["route"] and out["metrics"][0]["prompt_tokens"] > 30
    text = log.read_text()
    assert "BlockingError" not in text and "Blocking call" not in text, text[-3000:]
