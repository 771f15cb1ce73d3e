"""State holds references, never pixels, so real checkpointers store and restore it.

Each test runs on every kind of saver it applies to (``checkpoints`` / ``saver``: in memory,
SQLite, PostgreSQL; ``durable_checkpoints``: SQLite and PostgreSQL), PostgreSQL being a
throwaway server the session starts (``tests/postgres.py``).
"""

import base64
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from mai_graph import ScriptedBackend, create_mai_graph
from mai_graph.inputs.sources import image_ref

OPTIONS = ["red", "blue", "green", "yellow"]
CHILD = Path(__file__).parents[1] / "resume_child.py"


def backends():
    small = ScriptedBackend({"short": "A", "cot": "blue square and 2 circles", "s2": "C"}, name="s")
    large = ScriptedBackend({"short": "B", "answer": "D"}, name="l")
    return small, large


def check_round_trip(g, cfg, png):
    out = g.invoke({"question": "Which?", "options": OPTIONS, "image": str(png)}, cfg, context={})
    assert out["route"] == "transfer"
    values = g.get_state(cfg).values
    assert values["asked"]["image"]["sha256"] and values["reasoning"] == "blue square and 2 circles"
    assert values["metrics"] == out["metrics"]
    history = list(g.get_state_history(cfg))
    assert len(history) >= 5
    for snapshot in history:
        for value in snapshot.values.values():
            assert not isinstance(value, bytes | bytearray)


def test_saver_round_trip(saver, png):
    g = create_mai_graph(*backends()).compile(checkpointer=saver)
    check_round_trip(g, {"configurable": {"thread_id": "round-trip"}}, png)


def test_a_new_connection_sees_the_saved_state(durable_checkpoints, png):
    cfg = {"configurable": {"thread_id": "reopen"}}
    with durable_checkpoints.saver() as saver:
        check_round_trip(create_mai_graph(*backends()).compile(checkpointer=saver), cfg, png)
    # A fresh process would see the same state: reopen the database with a new saver.
    with durable_checkpoints.saver() as saver:
        g = create_mai_graph(*backends()).compile(checkpointer=saver)
        values = g.get_state(cfg).values
        assert values["route"] == "transfer" and values["asked"]["image"]["width"] == 64


async def test_async_saver(checkpoints, png):
    async with checkpoints.async_saver() as saver:
        g = create_mai_graph(*backends()).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "async"}}
        out = await g.ainvoke(
            {"question": "Which?", "options": OPTIONS, "image": str(png)}, cfg, context={}
        )
        assert out["route"] == "transfer"
        state = await g.aget_state(cfg)
        assert state.values["asked"]["image"]["height"] == 48


# -- PostgreSQL: a killed run resumes in a new process; the rows hold no pixels ----------------


def _calls(log: Path) -> dict[int, Counter]:
    """``{pid: Counter((model, purpose))}`` of the calls the children logged."""
    calls: dict[int, Counter] = {}
    for line in log.read_text().splitlines():
        pid, model, purpose, _ = line.split()
        calls.setdefault(int(pid), Counter())[(model, purpose)] += 1
    return calls


def _wait_for(check, what: str, timeout: float = 60.0, proc=None, err: Path | None = None):
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            why = err.read_text() if err else ""
            raise AssertionError(f"the child exited ({proc.returncode}) before {what}: {why}")
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.05)


def test_a_run_killed_mid_transfer_resumes_from_postgres_in_a_new_process(postgres, png, tmp_path):
    from langgraph.checkpoint.postgres import PostgresSaver

    url, log, err = postgres.database(), tmp_path / "calls.log", tmp_path / "start.err"
    log.touch()
    child = [sys.executable, str(CHILD), url, "killed", str(log), str(png)]
    cfg = {"configurable": {"thread_id": "killed"}}
    with open(err, "wb") as stderr:
        start = subprocess.Popen([*child, "start"], stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_for(lambda: "large answer" in log.read_text(), "answer call", proc=start, err=err)
        with PostgresSaver.from_conn_string(url) as saver:
            g = create_mai_graph(*backends()).compile(checkpointer=saver)
            # verify, reason, extract and sparsify are checkpointed; the transfer is in flight.
            _wait_for(lambda: g.get_state(cfg).next == ("answer",), "checkpoint before answer")
            assert start.poll() is None
            os.kill(start.pid, signal.SIGKILL)
            assert start.wait(timeout=10) == -signal.SIGKILL
            assert g.get_state(cfg).next == ("answer",)  # the killed call left nothing behind
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()

    resume = subprocess.run(
        [*child, "resume"], capture_output=True, text=True, timeout=120, check=False
    )
    assert resume.returncode == 0, resume.stderr
    out = json.loads(resume.stdout.splitlines()[-1])
    assert out["route"] == "transfer" and out["answer"] == "D"
    assert out["nodes"] == ["verify", "verify", "reason", "extract", "answer"]
    first, resumed = _calls(log).values()  # two processes, in the order they ran
    assert first == Counter(
        {("small", "short"): 1, ("large", "short"): 1, ("small", "cot"): 1,
         ("small", "s2"): 1, ("large", "answer"): 1}
    )  # fmt: skip
    assert resumed == Counter({("large", "answer"): 1})  # no finished node computed again
    sha = image_ref(png)["sha256"]
    assert all(line.endswith(sha) for line in log.read_text().splitlines())  # the same image


def _rows(url: str) -> list[tuple[tuple, bytes]]:
    """Every row of the checkpoint tables: (thread, table, step or channel, ...), its bytes."""
    import psycopg

    def raw(*values) -> bytes:
        return b"\n".join(v if isinstance(v, bytes) else json.dumps(v).encode() for v in values)

    with psycopg.connect(url) as conn:
        checkpoints = conn.execute(
            "SELECT thread_id, metadata->>'step', checkpoint, metadata FROM checkpoints"
        ).fetchall()
        blobs = conn.execute(
            "SELECT thread_id, channel, blob FROM checkpoint_blobs WHERE blob IS NOT NULL"
        ).fetchall()
        writes = conn.execute(
            "SELECT w.thread_id, w.channel, c.metadata->>'step', w.blob FROM checkpoint_writes w"
            " JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)"
        ).fetchall()
    assert checkpoints and blobs and writes, "a checkpoint table is empty: nothing was checked"
    return (
        [((t, "checkpoints", int(step)), raw(c, m)) for t, step, c, m in checkpoints]
        + [((t, "checkpoint_blobs", channel), bytes(b)) for t, channel, b in blobs]
        + [((t, "checkpoint_writes", ch, int(step)), bytes(b)) for t, ch, step, b in writes]
    )


def _holding(rows, needles) -> set[tuple]:
    return {place for place, data in rows if any(n in data for n in needles)}


def test_postgres_rows_hold_image_references_never_pixels(postgres, png):
    """A file, or an in-memory image given as a reference, never reaches the rows; a data URL
    given raw to ``invoke`` is LangGraph's record of the run's input, and only that."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from PIL import Image

    noise = Image.frombytes("RGB", (40, 36), bytes((i * 97 + i // 5) % 251 for i in range(4320)))
    buf = io.BytesIO()
    noise.save(buf, format="PNG")
    data_url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    file_pixels = (png.read_bytes(), Image.open(png).convert("RGB").tobytes())
    noise_pixels = (buf.getvalue(), noise.tobytes())
    inputs = {  # thread: (image input, its encoded bytes and RGB pixels)
        "file": (str(png), file_pixels),
        "reference": (image_ref(data_url), noise_pixels),  # stored once, by hash
        "data-url": (data_url, noise_pixels),
    }

    url, refs = postgres.database(), {}
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        g = create_mai_graph(*backends()).compile(checkpointer=saver)
        for thread, (image, _) in inputs.items():
            cfg = {"configurable": {"thread_id": thread}}
            question = {"question": "Which?", "options": OPTIONS, "image": image}
            assert g.invoke(question, cfg, context={})["route"] == "transfer"
            refs[thread] = g.get_state(cfg).values["asked"]["image"]
    rows = _rows(url)

    inputs_record = {  # the raw input, before the first node replaced it with a reference
        ("data-url", "checkpoint_blobs", "__start__"),
        ("data-url", "checkpoint_writes", "image", -1),
        ("data-url", "checkpoints", 0),
    }
    for thread, (_, (encoded, pixels)) in inputs.items():
        ref = refs[thread]
        assert set(ref) == {"path", "sha256", "width", "height"}
        assert ref["sha256"] == image_ref(inputs[thread][0])["sha256"]
        assert _holding(rows, [ref["sha256"].encode()])  # the reference is what was stored
        mine = [(place, data) for place, data in rows if place[0] == thread]
        assert not _holding(mine, [encoded, pixels[:48]])  # no file bytes, no pixel row
        b64 = base64.b64encode(encoded)
        windows = [b64[i : i + 40] for i in range(0, len(b64) - 40, 40)]
        assert _holding(mine, windows) <= inputs_record  # base64 only as the raw input
        if thread == "data-url":  # the search finds the image where it is (a control)
            assert _holding(mine, windows) == inputs_record
        assert _holding(mine, [b"data:image"]) <= inputs_record
        long_runs = {p for p, data in mine if re.search(rb"[A-Za-z0-9+/]{100,}", data)}
        assert long_runs <= inputs_record  # no long base64 run of anything else
    assert refs["reference"] == refs["data-url"]  # one image, one reference
    assert not refs["data-url"]["path"].startswith("data:")  # the store's file, not the URL
