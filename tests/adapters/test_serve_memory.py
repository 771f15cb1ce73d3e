"""The endpoint's memory bound, measured on a real `mai-graph serve` process.

A burst of requests, each with sixteen large (and highly compressible: small bodies, many
pixels) images, some of them over the question's pixel total, is sent at once; the server's
resident memory is sampled throughout. Its peak stays within
:func:`mai_graph.adapters.endpoint.server.memory_bound`
of its resting size, and after the burst it holds no more than the pixel cache's bound beyond
it. Fake backends answer, so the memory measured is the endpoint's own.
"""

import asyncio
import base64
import io
import os
import sys
import threading
import time

import pytest
from PIL import Image, ImageDraw

from tests.servers import free_port, serving

httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.server

CACHE_MB = 64


def picture(i: int, side: int) -> str:
    img = Image.new("RGB", (side, side), (i * 13 % 255, 90, 160))
    ImageDraw.Draw(img).rectangle((i * 50, 100, i * 50 + 300, 900), fill=(250, 10, 10))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def body(k: int, images: list[str]) -> dict:
    content = [{"type": "text", "text": f"Question {k}: which colour is the square?"}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in images]
    return {"model": "mai", "messages": [{"role": "user", "content": content}]}


class Sampler:
    """The peak resident memory of a process, sampled every 10 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.01)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_a_burst_of_requests_with_many_large_images_stays_within_the_bound(tmp_path):
    from mai_graph.adapters.endpoint.server import memory_bound

    fits = [picture(i, 2400) for i in range(16)]  # 92 M pixels: under the 100 M total
    over = [picture(i, 2600) for i in range(16)]  # 108 M pixels: refused at the 15th
    port = free_port()
    env = {**os.environ, "MAI_GRAPH_BACKEND": "fake", "MAI_GRAPH_PIXEL_CACHE_MB": str(CACHE_MB),
           "MAI_GRAPH_IMAGE_DIR": str(tmp_path / "store")}  # fmt: skip
    cmd = [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(port),
           "--max-preparing", "2"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with serving(cmd, f"{url}/health", tmp_path / "server.log", env=env, timeout=120) as proc:

        async def burst():
            async with httpx.AsyncClient(timeout=300) as c:
                asked = [body(k, fits) for k in range(8)] + [body(8 + k, over) for k in range(4)]
                return await asyncio.gather(
                    *(c.post(f"{url}/v1/chat/completions", json=b) for b in asked)
                )

        cold = psutil.Process(proc.pid).memory_info().rss
        asyncio.run(burst())  # warm: imports, the first decodes, the allocator's arenas
        time.sleep(0.5)
        rest = psutil.Process(proc.pid).memory_info().rss
        with Sampler(proc.pid) as sampler:
            answers = asyncio.run(burst())
            time.sleep(0.5)
        after = psutil.Process(proc.pid).memory_info().rss
    statuses = [r.status_code for r in answers]
    assert statuses == [200] * 8 + [400] * 4, statuses
    refused = answers[-1].json()["error"]
    assert refused["param"] == "messages" and "image 15 of 16" in refused["message"]
    os.environ["MAI_GRAPH_PIXEL_CACHE_MB"] = str(CACHE_MB)
    try:
        bound = memory_bound(max_preparing=2)
    finally:
        del os.environ["MAI_GRAPH_PIXEL_CACHE_MB"]
    mb = 1e6
    print(
        f"cold {cold / mb:.0f} MB, rest {rest / mb:.0f} MB, peak {sampler.peak / mb:.0f} MB "
        f"(+{(sampler.peak - rest) / mb:.0f}, bound +{bound / mb:.0f}), after {after / mb:.0f} MB"
    )
    assert sampler.peak - rest <= bound
    assert after - rest <= 48 * mb, "the second burst's memory was kept"
    assert rest - cold <= bound, "the first burst's memory was kept beyond the bound"
