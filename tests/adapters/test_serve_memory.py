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
import socket
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


# -- the transport before the key check ----------------------------------------------------------

KEY = "sk-flood-test"
HUGE_HEADS, SLOW_HEADS, SLOW_BODIES, KEYLESS_BODIES = 24, 24, 4, 4
HEAD_BYTES_SENT = 8 * 1024 * 1024  # each huge head's header value, if the server takes it


def _closed_by_server(sock, wait_s: float) -> tuple[bytes, bool]:
    """What the server answered, and whether it then closed the connection, within ``wait_s``."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return data, True
    except TimeoutError:
        return data, False


def _huge_head(port: int, out: list) -> None:
    """A header value that never ends: 8 MiB of it, sent as fast as the server takes it."""
    start, sent = time.monotonic(), 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Filler: ")
        block = b"a" * 65536
        try:
            while sent < HEAD_BYTES_SENT:
                sock.sendall(block)
                sent += len(block)
        except OSError:  # the server closed it
            pass
        reply, closed = _closed_by_server(sock, 3)
    out.append(("huge head", reply, closed, time.monotonic() - start))


def _slow_head(port: int, out: list) -> None:
    """A head that arrives a byte every half second (slowloris)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        reply, closed = b"", False
        while not closed and time.monotonic() - start < 10:
            reply, closed = _closed_by_server(sock, 0.5)
            if not closed:
                try:
                    sock.sendall(b"z")
                except OSError:
                    closed = True
    out.append(("slow head", reply, closed, time.monotonic() - start))


def _slow_body(port: int, out: list) -> None:
    """A key holder whose 1,000-byte body arrives a byte every half second."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                      f"{KEY}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
                      ).encode())  # fmt: skip
        reply, closed = b"", False
        while not reply and time.monotonic() - start < 12:
            reply, closed = _closed_by_server(sock, 0.5)
            if not reply:
                try:
                    sock.sendall(b" ")
                except OSError:
                    break
    out.append(("slow body", reply, closed, time.monotonic() - start))


def _keyless_body(port: int, out: list) -> None:
    """No key, and a 64 MiB body streamed after the head: refused, and not read on."""
    start, sent = time.monotonic(), 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 67108864\r\n\r\n")  # fmt: skip
        block = b" " * 65536
        try:
            while sent < 16 * 1024 * 1024:
                sock.sendall(block)
                sent += len(block)
        except OSError:
            pass
        reply, closed = _closed_by_server(sock, 3)
    out.append(("keyless body", reply, closed, time.monotonic() - start))


def test_header_floods_and_slow_bodies_stay_within_the_bound_and_a_request_is_answered(tmp_path):
    """Unauthenticated connections sending endless and trickled heads, key holders trickling
    bodies, and keyless clients streaming bodies, all at once: the server's memory stays within
    the share of :func:`memory_bound` that its connections may hold, each is cut off (431, 408,
    401 and closed) within its limit, and a good request meanwhile is answered in seconds."""
    from mai_graph.adapters.endpoint.app import BODY_GRACE_S
    from mai_graph.adapters.endpoint.server import (
        CONNECTION_BYTES,
        HEAD_TIMEOUT_S,
        memory_bound,
    )

    port = free_port()
    env = {**os.environ, "MAI_GRAPH_BACKEND": "fake", "MAI_GRAPH_SERVE_API_KEY": KEY,
           "MAI_GRAPH_PIXEL_CACHE_MB": str(CACHE_MB),
           "MAI_GRAPH_IMAGE_DIR": str(tmp_path / "store")}  # fmt: skip
    cmd = [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(port),
           "--max-preparing", "2"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    good = body(0, [picture(1, 64)])
    auth = {"authorization": f"Bearer {KEY}"}
    with serving(cmd, f"{url}/health", tmp_path / "server.log", env=env, timeout=120) as proc:
        with httpx.Client(timeout=30) as c:  # warm: imports, a refusal, an answer
            _huge_head(port, [])
            assert c.post(f"{url}/v1/chat/completions", json=good, headers=auth).status_code == 200
        time.sleep(0.5)
        rest = psutil.Process(proc.pid).memory_info().rss
        out: list = []
        floods = [(_huge_head, HUGE_HEADS), (_slow_head, SLOW_HEADS),
                  (_slow_body, SLOW_BODIES), (_keyless_body, KEYLESS_BODIES)]  # fmt: skip
        threads = [threading.Thread(target=f, args=(port, out), daemon=True)
                   for f, n in floods for _ in range(n)]  # fmt: skip
        with Sampler(proc.pid) as sampler:
            for t in threads:
                t.start()
            time.sleep(0.5)  # the slow bodies hold both admission slots, two more wait
            start = time.monotonic()
            with httpx.Client(timeout=20) as c:
                answer = c.post(f"{url}/v1/chat/completions", json=good, headers=auth)
            waited = time.monotonic() - start
            for t in threads:
                t.join(timeout=30)
            time.sleep(0.5)
        after = psutil.Process(proc.pid).memory_info().rss
    mb = 1e6
    share = len(threads) * CONNECTION_BYTES
    os.environ["MAI_GRAPH_PIXEL_CACHE_MB"] = str(CACHE_MB)
    try:
        bound = memory_bound(max_preparing=2)
    finally:
        del os.environ["MAI_GRAPH_PIXEL_CACHE_MB"]
    took = {kind: max(t for k, _, _, t in out if k == kind) for kind, *_ in out}
    grew = sampler.peak - rest
    print(
        f"rest {rest / mb:.0f} MB, peak {sampler.peak / mb:.0f} MB (+{grew / mb:.1f}; "
        f"{len(threads)} connections' share +{share / mb:.0f}, bound +{bound / mb:.0f}), "
        f"after {after / mb:.0f} MB; the good request waited {waited:.1f} s; slowest cut-off "
        + ", ".join(f"{kind} {s:.1f} s" for kind, s in took.items())
    )
    assert answer.status_code == 200 and waited < 4 * BODY_GRACE_S, (answer.status_code, waited)
    assert len(out) == len(threads), "a flooding connection was never cut off"
    for kind, reply, closed, _ in out:
        assert closed, f"the server kept a {kind} connection open"
        status = reply.split(b" ", 2)[1] if reply.startswith(b"HTTP/1.1 ") else b""
        expected = {"huge head": (b"431", b""), "slow head": (b"408",), "slow body": (b"408",),
                    "keyless body": (b"401", b"")}[kind]  # fmt: skip
        assert status in expected, (kind, reply[:300])  # "" : reset before the answer was read
    assert took["slow head"] < HEAD_TIMEOUT_S + 2 and took["slow body"] < 3 * BODY_GRACE_S + 2
    assert b'"param": "headers"' in next(r for k, r, *_ in out if k == "slow head")
    assert grew <= share, "the flood held more than its connections' share of the bound"
    assert grew <= bound
