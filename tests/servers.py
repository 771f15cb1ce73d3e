"""Start a real server process for a test and stop it afterwards, or serve an ASGI app in this
process without a socket (:func:`in_process`)."""

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """Hold processes still (SIGSTOP) for the block, then let them go on (SIGCONT).

    Fault and cancellation tests pause a test's own engine processes while they cancel or
    kill: a CPU engine that is generating can hold the test process back until it is done,
    so without the pause the cancel might land only after the request finished.
    """
    import psutil

    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            process.suspend()
            processes.append(process)
    try:
        yield
    finally:
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.resume()


def children(pid: int) -> list[int]:
    """A server's processes below its own (the engines it started)."""
    import psutil

    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


_TGKILL = {"x86_64": 234, "aarch64": 131}  # syscall numbers of tgkill(2)


def signal_side_thread(pid: int, signum: int) -> int:
    """Send ``signum`` to one Python thread of process ``pid`` other than its main thread.

    A process-directed signal goes to whichever thread the kernel picks; this makes the rare
    pick (not the main thread) happen on purpose. Returns the thread id; skips the test where
    tgkill's syscall number is not known.
    """
    import ctypes
    import platform

    number = _TGKILL.get(platform.machine())
    if number is None:
        pytest.skip(f"tgkill's syscall number on {platform.machine()} is not known here")
    name = Path(f"/proc/{pid}/comm").read_text().strip()
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        task = Path(f"/proc/{pid}/task/{tid}")
        blocked = next(line for line in (task / "status").read_text().splitlines()
                       if line.startswith("SigBlk:")).split()[1]  # fmt: skip
        # a Python thread carries the process's name and blocks no signal (ZMQ's threads do)
        if tid != pid and (task / "comm").read_text().strip() == name and int(blocked, 16) == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.syscall(number, pid, tid, signum) != 0:
                raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}) failed")
            return tid
    raise AssertionError(f"process {pid} has no side thread to signal")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read().decode()


@contextlib.contextmanager
def serving(cmd: list[str], health_url: str, log_path: Path, *, env=None, cwd=None,
            timeout: float = 300) -> Iterator[subprocess.Popen]:  # fmt: skip
    """Run ``cmd`` until ``health_url`` answers 200; fail the test with the log if it never does.

    The server runs in its own process group, and the whole group is stopped afterwards: a
    server's engine processes (vLLM cores and workers) never outlive the test.
    """
    with open(log_path, "w+") as log:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(OSError):
                    if get(health_url)[0] == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"{cmd[0]} did not come up:\n{log.read()[-3000:]}")
                time.sleep(0.5)
            yield proc
        finally:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen, grace_s: float = 60) -> None:
    """SIGTERM the process group, wait, then SIGKILL whatever of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # the engines exit after their server
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@contextlib.contextmanager
def serving_app(app, **limits: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a free loopback port, in a thread; yields its URL.

    Configured as ``mai-graph serve`` configures it (``server_config``: the bounded transport);
    ``limits`` are ``server_config``'s keywords (``max_connections``, ``head_timeout_s``, ...).
    """
    import threading

    import uvicorn

    from mai_graph.adapters.endpoint.server import server_config

    port = free_port()
    server = uvicorn.Server(server_config(app, port=port, **limits))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


# -- an ASGI app in this process, no socket ------------------------------------------------------


# httpx2: the HTTP client of Starlette's TestClient and of the openai client.


class _Forward(httpx2.BaseTransport):
    """Requests of a fresh client into the app's shared TestClient: the openai client closes
    the HTTP client it is given, which must not stop the app."""

    def __init__(self, client: httpx2.Client) -> None:
        self._client = client

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        return self._client.send(request, stream=True)


@dataclass
class InProcess:
    """An ASGI app served in this process (:func:`in_process`); ``client`` is its TestClient."""

    app: Any
    client: httpx2.Client
    url: str = "http://testserver"

    def http(self, **kwargs: Any) -> httpx2.Client:
        """A fresh synchronous client into the app; closing it leaves the app running."""
        return httpx2.Client(transport=_Forward(self.client), base_url=self.url, **kwargs)

    def async_http(self, **kwargs: Any) -> httpx2.AsyncClient:
        """An asynchronous client into the app, run on the caller's loop (ASGITransport)."""
        return httpx2.AsyncClient(
            transport=httpx2.ASGITransport(self.app), base_url=self.url, **kwargs
        )

    def openai(self, key: str = "x", **kwargs: Any) -> Any:
        """The official ``openai`` client on the app (no retries)."""
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0,
                             http_client=self.http(), **kwargs)  # fmt: skip

    def async_openai(self, key: str = "x", **kwargs: Any) -> Any:
        """The official ``openai`` async client on the app (no retries)."""
        import openai

        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0,
                                  http_client=self.async_http(), **kwargs)  # fmt: skip


@contextlib.contextmanager
def in_process(app: Any) -> Iterator[InProcess]:
    """Serve an ASGI ``app`` in this process, without a socket: Starlette's TestClient runs its
    lifespan and every synchronous request on one event loop, as uvicorn would.

    For what needs a real server (a client that disconnects, a trickled body, a stop signal,
    a client that only takes a URL), use :func:`serving_app`.
    """
    from starlette.testclient import TestClient

    with TestClient(app) as client:
        yield InProcess(app, client)
