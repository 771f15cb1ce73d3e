"""A throwaway PostgreSQL server for the persistence tests, and checkpoint savers on it.

The first test that needs it starts one server for the session: ``initdb`` in a fresh temp
folder, then ``postgres`` listening on 127.0.0.1 only, on a free port, its unix socket in the
same folder, trust authentication, no durability (``fsync=off``: the data is thrown away).
PostgreSQL refuses to run as root, so when the tests run as root the folder belongs to the
``postgres`` user and the server runs as that user. At the end of the session the server is
stopped (``pg_ctl stop -m fast``, killed if it does not stop) and the folder removed, also when
tests failed; if the test process dies first, the server gets SIGINT (a fast shutdown) from
the kernel (``PR_SET_PDEATHSIG``), so no server outlives the tests.

Each test gets a database of its own (:meth:`Postgres.database`), so no test sees another's
threads. Where PostgreSQL is not installed (no ``initdb`` on the ``PATH`` or under
``/usr/lib/postgresql/*/bin``, Debian's place for it) or its server cannot start, the tests that
need it are skipped with the reason; with ``MAI_GRAPH_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it
where the server is installed) they fail instead.

The fixtures (imported by ``tests/conftest.py``): ``postgres`` (the server), ``checkpoints``
(one test's checkpoint database on each kind of saver: in memory, SQLite, Postgres),
``durable_checkpoints`` (SQLite and Postgres only: databases a new process could reopen) and
``saver`` (a saver open on ``checkpoints`` for the test).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

START_TIMEOUT_S = 30.0
"""How long the server may take to accept connections before the tests give up on it."""

SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "50",
    "max_wal_size": "1GB",
    "autovacuum": "off",
}
"""Server settings: loopback only, and nothing spent on keeping data the session throws away."""

_databases = itertools.count(1)


def find_bindir() -> Path | None:
    """The folder of ``initdb``, ``pg_ctl`` and ``postgres``: the ``PATH``'s, else the newest
    of Debian's ``/usr/lib/postgresql/<version>/bin``; None where PostgreSQL is not installed.
    """
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    found = Path("/usr/lib/postgresql").glob("*/bin/initdb")
    versions = sorted(found, key=lambda p: [int(n) for n in re.findall(r"\d+", p.parts[-3])])
    return versions[-1].parent if versions else None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to send this process SIGINT (a fast shutdown) when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


@dataclass
class Postgres:
    """A running throwaway server: where it listens and how to make databases on it."""

    port: int
    """The loopback TCP port it listens on."""
    root: Path
    """Its temp folder (data, socket, log)."""
    bindir: Path
    """Where its programs are."""
    startup_s: float = 0.0
    """Seconds from ``initdb`` to the first accepted connection."""
    as_user: dict[str, Any] = field(default_factory=dict)
    """``subprocess`` arguments that run a program as the server's owner."""

    def url(self, database: str = "postgres") -> str:
        """A connection URL for one of its databases."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """Create a new empty database and return its URL."""
        import psycopg

        name = f"test_{next(_databases)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self, since: int = 0) -> str:
        """The server's log from byte ``since`` on (its last 3,000 characters)."""
        path = self.root / "postgres.log"
        return path.read_bytes()[since:].decode(errors="replace")[-3000:] if path.exists() else ""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as(bindir: Path, args: list[str], as_user: dict[str, Any], timeout: float) -> None:
    done = subprocess.run(
        [str(bindir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **as_user,
    )
    if done.returncode:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr or done.stdout}")


def _owner() -> dict[str, Any]:
    """``subprocess`` arguments that run PostgreSQL's programs as a user they accept."""
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "the tests run as root, PostgreSQL refuses to, and there is no 'postgres' user to "
            "run it as (Debian's postgresql package creates one)"
        ) from None
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _wait_ready(server: subprocess.Popen, url: str, deadline: float) -> None:
    import psycopg

    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.returncode}")
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the server did not accept connections within {START_TIMEOUT_S:.0f} s"
                ) from None
            time.sleep(0.05)


def _stop(pg: Postgres, server: subprocess.Popen) -> None:
    """Stop the server (fast shutdown), killing it if it does not stop in time."""
    if server.poll() is None:
        with contextlib.suppress(Exception):
            _run_as(
                pg.bindir,
                ["pg_ctl", "stop", "-D", str(pg.root / "data"), "-m", "fast", "-w", "-t", "15"],
                pg.as_user,
                timeout=20,
            )
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=5)


@contextlib.contextmanager
def running_postgres(bindir: Path) -> Iterator[Postgres]:
    """Start a throwaway server from ``bindir``'s programs; stop it and remove it afterwards.

    Raises:
        RuntimeError: The server could not be set up or started; the message says why.
    """
    as_user = _owner()
    root = Path(tempfile.mkdtemp(prefix="mai-graph-pg-"))
    server: subprocess.Popen | None = None
    pg = Postgres(port=0, root=root, bindir=bindir, as_user=as_user)
    try:
        if as_user:
            os.chown(root, as_user["user"], as_user["group"])
        start = time.monotonic()
        as_owner = {**as_user, "cwd": root}
        _run_as(bindir, ["initdb", "-D", str(root / "data"), "-U", "postgres", "-A", "trust",
                         "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                as_owner, timeout=120)  # fmt: skip
        for _ in range(3):  # a free port may be taken before the server binds it: try another
            pg.port = _free_port()
            options = [f"-c{key}={value}" for key, value in SETTINGS.items()]
            with open(root / "postgres.log", "ab") as log:
                since = log.tell()
                server = subprocess.Popen(
                    [str(bindir / "postgres"), "-D", str(root / "data"), "-p", str(pg.port),
                     "-k", str(root), *options],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                    **as_owner,
                )  # fmt: skip
            try:
                _wait_ready(server, pg.url(), time.monotonic() + START_TIMEOUT_S)
                break
            except RuntimeError as err:
                _stop(pg, server)
                server = None
                if "Address already in use" not in pg.log(since):
                    raise RuntimeError(f"{err}; its log ends:\n{pg.log(since)}") from None
        else:
            raise RuntimeError(f"no free port found; the log ends:\n{pg.log()}")
        pg.startup_s = time.monotonic() - start
        yield pg
    finally:
        if server is not None:
            _stop(pg, server)
        shutil.rmtree(root, ignore_errors=True)


# -- fixtures (imported by tests/conftest.py) ----------------------------------------------------


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("MAI_GRAPH_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required here (MAI_GRAPH_REQUIRE_POSTGRES=1): {reason}")
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One throwaway PostgreSQL server for the session (skipped where it cannot run)."""
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as err:
        _unavailable(f"{err.name} is not installed (pip install 'mai-graph[postgres]')")
    bindir = find_bindir()
    if bindir is None:
        _unavailable(
            "no initdb on the PATH or under /usr/lib/postgresql/*/bin "
            "(install Debian's postgresql package)"
        )
    with contextlib.ExitStack() as stack:
        try:
            pg = stack.enter_context(running_postgres(bindir))
        except (RuntimeError, OSError, subprocess.SubprocessError) as err:
            _unavailable(f"the server in {bindir} cannot start: {err}")
        print(f"\nPostgreSQL {bindir} on 127.0.0.1:{pg.port}, started in {pg.startup_s:.2f} s")
        yield pg


class Checkpoints:
    """One test's checkpoint database on one kind of saver; open savers on it any number of
    times, each like a new process would (except in memory, where there is only one).
    """

    def __init__(self, kind: str, *, path: Path | None = None, url: str | None = None) -> None:
        from langgraph.checkpoint.memory import InMemorySaver

        self.kind = kind
        self.path = path
        self.url = url
        self._memory = InMemorySaver()

    @contextlib.contextmanager
    def saver(self) -> Iterator[Any]:
        """A synchronous saver on this database (tables set up), closed after the block."""
        if self.kind == "memory":
            yield self._memory
        elif self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            with SqliteSaver.from_conn_string(str(self.path)) as saver:
                yield saver
        else:
            from langgraph.checkpoint.postgres import PostgresSaver

            with PostgresSaver.from_conn_string(str(self.url)) as saver:
                saver.setup()
                yield saver

    @contextlib.asynccontextmanager
    async def async_saver(self) -> AsyncIterator[Any]:
        """An asynchronous saver on this database (tables set up), closed after the block."""
        if self.kind == "memory":
            yield self._memory
        elif self.kind == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(str(self.path)) as saver:
                yield saver
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            async with AsyncPostgresSaver.from_conn_string(str(self.url)) as saver:
                await saver.setup()
                yield saver


def _checkpoints(request: pytest.FixtureRequest, tmp_path: Path) -> Checkpoints:
    kind = request.param
    if kind == "postgres":
        return Checkpoints(kind, url=request.getfixturevalue("postgres").database())
    return Checkpoints(kind, path=tmp_path / "checkpoints.sqlite")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def checkpoints(request: pytest.FixtureRequest, tmp_path: Path) -> Checkpoints:
    """This test's own checkpoint database, once per kind of saver."""
    return _checkpoints(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def durable_checkpoints(request: pytest.FixtureRequest, tmp_path: Path) -> Checkpoints:
    """This test's own checkpoint database that a new process could reopen, once per kind."""
    return _checkpoints(request, tmp_path)


@pytest.fixture
def saver(checkpoints: Checkpoints) -> Iterator[Any]:
    """A synchronous saver open on ``checkpoints`` for the whole test."""
    with checkpoints.saver() as opened:
        yield opened
