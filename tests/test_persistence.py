"""State holds references, never pixels, so real checkpointers store and restore it."""

import asyncio

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from mai_graph import ScriptedBackend, create_mai_graph

OPTIONS = ["red", "blue", "green", "yellow"]


def backends():
    small = ScriptedBackend({"short": "A", "cot": "blue square and 2 circles", "s2": "C"}, name="s")
    large = ScriptedBackend({"short": "B", "answer": "D"}, name="l")
    return small, large


def check_round_trip(g, cfg, png):
    out = g.invoke({"question": "Which?", "options": OPTIONS, "image": str(png)}, cfg, context={})
    assert out["route"] == "transfer"
    values = g.get_state(cfg).values
    assert (
        values["request"]["image"]["sha256"] and values["reasoning"] == "blue square and 2 circles"
    )
    assert values["metrics"] == out["metrics"]
    history = list(g.get_state_history(cfg))
    assert len(history) >= 5
    for snapshot in history:
        for value in snapshot.values.values():
            assert not isinstance(value, bytes | bytearray)


def test_in_memory_saver(png):
    g = create_mai_graph(*backends()).compile(checkpointer=InMemorySaver())
    check_round_trip(g, {"configurable": {"thread_id": "mem"}}, png)


def test_sqlite_saver_survives_a_new_connection(png, tmp_path):
    db = tmp_path / "state.sqlite"
    cfg = {"configurable": {"thread_id": "sql"}}
    with SqliteSaver.from_conn_string(str(db)) as saver:
        check_round_trip(create_mai_graph(*backends()).compile(checkpointer=saver), cfg, png)
    # A fresh process would see the same state: reopen the file with a new saver.
    with SqliteSaver.from_conn_string(str(db)) as saver:
        g = create_mai_graph(*backends()).compile(checkpointer=saver)
        values = g.get_state(cfg).values
        assert values["route"] == "transfer" and values["request"]["image"]["width"] == 64


def test_async_sqlite_saver(png, tmp_path):

    async def go():
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.sqlite")) as saver:
            g = create_mai_graph(*backends()).compile(checkpointer=saver)
            cfg = {"configurable": {"thread_id": "async"}}
            out = await g.ainvoke(
                {"question": "Which?", "options": OPTIONS, "image": str(png)}, cfg, context={}
            )
            assert out["route"] == "transfer"
            state = await g.aget_state(cfg)
            assert state.values["request"]["image"]["height"] == 48

    asyncio.run(go())
