import json

from mai_graph.eval.records import (
    RECORDS_FILE,
    CallRecord,
    RecordWriter,
    SampleRecord,
    SessionRecord,
    read_records,
)


def _session():
    return SessionRecord(started="t", version="v", context={}, branches=False, keep_ratios=[0.2],
                         models={"small": "s", "large": "l"})  # fmt: skip


def _call(sample, node="verify", role="small", text="A"):
    return CallRecord(sample=sample, policy="mai", node=node, role=role, model="m",
                      prompt_tokens=10, generated_tokens=1, latency_s=0.1, text=text)  # fmt: skip


def _done(sample, answer="A"):
    return SampleRecord(sample=sample, policy="mai", route="agree", answer=answer, canonical=answer,
                        wall_s=0.2, gold="A", kind="choice", options={"A": "x", "B": "y"},
                        digest="d")  # fmt: skip


def test_runs_group_their_calls(tmp_path):
    with RecordWriter(tmp_path) as w:
        w.write([_session()])
        w.write([_call("a"), _call("a", role="large"), _done("a")])
        w.write([_call("b"), _done("b", "B")])
    records = read_records(tmp_path)
    assert records.problems == [] and len(records.sessions) == 1
    assert [len(r.calls) for r in records.runs.values()] == [2, 1]
    assert records.runs["mai", "b"].record.answer == "B"
    assert records.policies() == ["mai"]


def test_a_partial_last_line_is_ignored_and_appending_after_it_is_safe(tmp_path):
    with RecordWriter(tmp_path) as w:
        w.write([_session(), _call("a"), _done("a")])
    path = tmp_path / RECORDS_FILE
    whole = _call("b").model_dump_json() + "\n" + _done("b").model_dump_json()
    with path.open("a") as fh:  # a crash in the middle of run b's write
        fh.write(whole[: len(whole) - 20])
    records = read_records(tmp_path)
    assert list(records.runs) == [("mai", "a")]
    assert records.problems == [
        "line 5: partial last line (an interrupted write), ignored",
        "1 call line(s) of 1 unfinished run(s) ignored",
    ]
    with RecordWriter(tmp_path) as w:  # resume: a new session, run b again
        w.write([_session()])
        w.write([_call("b"), _done("b")])
    records = read_records(tmp_path)
    assert list(records.runs) == [("mai", "a"), ("mai", "b")]
    assert len(records.runs["mai", "b"].calls) == 1  # the orphan call is not attached
    assert records.problems == [
        "line 5: unreadable line, ignored",
        "1 call line(s) of 1 unfinished run(s) ignored",
    ]
    lines = path.read_text().splitlines()
    for line in lines[:4] + lines[5:]:
        json.loads(line)


def test_a_redone_run_replaces_the_earlier_one(tmp_path):
    with RecordWriter(tmp_path) as w:
        w.write([_session(), _call("a"), _done("a", "A")])
        w.write([_call("a", text="B"), _done("a", "B")])
    run = read_records(tmp_path).runs["mai", "a"]
    assert run.record.answer == "B" and [c.text for c in run.calls] == ["B"]


def test_missing_file_reads_empty(tmp_path):
    records = read_records(tmp_path / "nothing")
    assert records.runs == {} and records.problems == []


def test_sample_lines_of_earlier_versions_still_load_and_score(tmp_path):
    """A completion line written before human answers were recorded has no ``references``."""
    line = _done("q").model_dump()
    del line["references"]
    (tmp_path / RECORDS_FILE).write_text(
        json.dumps(_session().model_dump()) + "\n" + json.dumps(line) + "\n"
    )
    records = read_records(tmp_path)
    record = records.runs["mai", "q"].record
    assert record.references is None and records.problems == []
    assert record.verdict("A").credit == 1.0 and record.verdict("B").credit == 0.0
