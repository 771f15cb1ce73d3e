"""Local `vllm serve` replicas behind `vllm-router`, on loopback, for tests and benchmarks.

Servers start together (on a CPU they spend their start-up importing and loading, so starting
them at once takes little longer than one), each in its own process group so that killing a
replica takes its engine process with it, as a machine that dies would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import free_port, get

ROUTER_FAILOVER = [
    # Probe workers every second and drop one at its first failed probe; open a worker's
    # circuit after two failed requests; retry a failed request (on the next pick) quickly.
    "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
    "--health-check-timeout-secs", "2", "--cb-failure-threshold", "2",
    "--cb-timeout-duration-secs", "300", "--retry-max-retries", "4",
    "--retry-initial-backoff-ms", "100", "--retry-max-backoff-ms", "1000",
]  # fmt: skip


@dataclass
class Server:
    """One server process (a `vllm serve` replica or the router)."""

    name: str
    base: str
    """``http://127.0.0.1:PORT`` (the OpenAI API is under ``/v1``)."""
    proc: subprocess.Popen
    log: Path
    served: str = ""
    """The served model name (replicas)."""
    killed: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"{self.base}/v1"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kill the whole process group at once (SIGKILL): a replica that dies."""
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop gracefully (SIGTERM), then kill what is left of the group."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def vllm_command(model: str | Path, served: str, port: int) -> list[str]:
    """`vllm serve` on a CPU (the module form: the console script needs the `vllm` name)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", served, "--host", "127.0.0.1", "--port", str(port),
            "--enforce-eager", "--gpu-memory-utilization", "0.05", "--block-size", "32",
            "--max-model-len", "4096", "--enable-prompt-tokens-details",
            "--enable-per-request-metrics"]  # fmt: skip


def router_command(
    workers: Sequence[str], port: int, policy: str, extra: Sequence[str]
) -> list[str]:
    exe = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or "vllm-router"
    return [exe, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
            "--policy", policy, "--log-level", "info", "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port()), *extra]  # fmt: skip


def _spawn(name: str, cmd: list[str], port: int, log_dir: Path, env: dict) -> Server:
    log = log_dir / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Server(name, f"http://127.0.0.1:{port}", proc, log)


def _wait_healthy(servers: Sequence[Server], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(servers)
    while waiting:
        for server in list(waiting):
            with contextlib.suppress(OSError):
                if get(f"{server.base}/health")[0] == 200:
                    waiting.remove(server)
                    continue
            if not server.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{server.name} did not come up:\n{server.tail()}")
        time.sleep(0.5)


def engine_env() -> dict[str, str]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@contextlib.contextmanager
def replicas(
    models: Sequence[tuple[str, str | Path, str] | tuple[str, str | Path, str, dict[str, str]]],
    log_dir: Path,
    timeout: float = 400,
) -> Iterator[list[Server]]:
    """Start ``(name, model dir, served name[, environment])`` servers at once.

    All are stopped at the end. The optional environment is added to the server's (e.g.
    ``VLLM_CPU_OMP_THREADS_BIND`` to pin a replica to its own core).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    servers: list[Server] = []
    try:
        for name, model, served, *more in models:
            port = free_port()
            env = {**engine_env(), **(more[0] if more else {})}
            server = _spawn(name, vllm_command(model, served, port), port, log_dir, env)
            server.served = served
            servers.append(server)
        _wait_healthy(servers, timeout)
        yield servers
    finally:
        for server in servers:
            server.stop()


@contextlib.contextmanager
def router(
    workers: Sequence[Server],
    log_dir: Path,
    *,
    name: str = "router",
    policy: str = "consistent_hash",
    extra: Sequence[str] = ROUTER_FAILOVER,
) -> Iterator[Server]:
    """`vllm-router` in front of ``workers``."""
    port = free_port()
    cmd = router_command([w.base for w in workers], port, policy, extra)
    server = _spawn(name, cmd, port, log_dir, dict(os.environ))
    try:
        _wait_healthy([server], 60)
        yield server
    finally:
        server.stop()


def metric(base: str, name: str) -> float:
    """The sum of a Prometheus metric's samples on a vLLM server."""
    _, text = get(f"{base}/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def finished(base: str) -> float:
    """Requests the server has finished (any reason)."""
    return metric(base, "vllm:request_success_total")


def tokenize(base: str, model: str, messages: list[dict]) -> list[int]:
    """The prompt's token ids as the server builds them (chat template, image tokens)."""
    body = {"model": model, "messages": messages, "add_generation_prompt": True}
    req = urllib.request.Request(
        f"{base}/tokenize", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return list(json.load(resp)["tokens"])
