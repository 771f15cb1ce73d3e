"""One MAI run on a PostgreSQL checkpointer, in a process of its own (a child of a test).

    python tests/resume_child.py URL THREAD LOG IMAGE start|resume

``start`` begins a run on thread ``THREAD`` whose large model hangs in its ``answer`` call
(the transfer), so that the test can kill the process there; ``resume`` resumes the thread
with ``ainvoke(None, ...)`` on an ``AsyncPostgresSaver`` and prints the result as JSON. Every
model call is appended to ``LOG`` as ``<pid> <model> <purpose> <image sha256>`` as it starts,
so the test counts what each process computed. Used by
``tests/core/test_persistence.py::test_a_run_killed_mid_transfer_resumes_from_postgres_in_a_new_process``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mai_graph import FunctionBackend, create_mai_graph
from mai_graph.backends.base import GenerationRequest

OPTIONS = ["red", "blue", "green", "yellow"]
ANSWERS = {
    "small": {"short": "A", "cot": "the square is blue not red so option B", "s2": "C"},
    "large": {"short": "B", "answer": "D"},
}


def backend(name: str, log: str, hang: bool) -> FunctionBackend:
    """A fake model that logs each call, and with ``hang`` never finishes an ``answer``."""

    async def respond(request: GenerationRequest) -> str:
        image = request.image["sha256"] if request.image else "-"
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {name} {request.purpose} {image}\n")
        if hang and request.purpose == "answer":
            await asyncio.sleep(3600)  # the test kills this process here
        return ANSWERS[name][request.purpose]

    return FunctionBackend(respond, name=name)


def main() -> None:
    """Start or resume the run named on the command line."""
    url, thread, log, image, mode = sys.argv[1:]
    hang = mode == "start"
    graph = create_mai_graph(backend("small", log, hang), backend("large", log, hang))
    config = {"configurable": {"thread_id": thread}}
    if mode == "start":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            question = {"question": "Which colour?", "options": OPTIONS, "image": image}
            graph.compile(checkpointer=saver).invoke(question, config, context={})
        return

    async def resume() -> dict:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            await saver.setup()
            return await graph.compile(checkpointer=saver).ainvoke(None, config, context={})

    out = asyncio.run(resume())
    print(json.dumps({"route": out["route"], "answer": out["answer"],
                      "nodes": [m["node"] for m in out["metrics"]]}))  # fmt: skip


if __name__ == "__main__":
    main()
