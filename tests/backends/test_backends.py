"""Backend capabilities are declared Protocols; missing extras fail clearly; one registry."""

import importlib
import importlib.util
import sys

import pytest

from mai_graph import FunctionBackend, Generation, ScriptedBackend, create_mai_graph
from mai_graph.backends.base import (
    AttentionBackend,
    LogprobsBackend,
    ManagedBackend,
    StreamingBackend,
    VLMBackend,
    VocabularyBackend,
)
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.backends.recording import RecordingBackend
from mai_graph.backends.steered import SteeredBackend
from mai_graph.engines.select import BACKENDS
from mai_graph.nodes.sparsify import same_tokenizer


class Plain:
    """The minimum backend: a name and generate()."""

    name = "plain"

    async def generate(self, request):
        return Generation("A", self.name, 1, 1, 0.0)


class LazyEngine(Plain):
    """A backend whose tokenizer only exists once its engine started (like vLLM)."""

    def __init__(self, vocab):
        self.vocab, self.started, self.stopped = vocab, 0, 0

    async def start(self):
        self.started += 1

    def shutdown(self):
        self.stopped += 1

    async def vocab_fingerprint(self):
        if not self.started:
            await self.start()
        return f"vocab-{self.vocab}"


def test_fakes_declare_what_they_support():
    for backend in (ScriptedBackend("A"), FunctionBackend(lambda r: "A")):
        assert isinstance(backend, VLMBackend)
        assert isinstance(backend, StreamingBackend)
        assert isinstance(backend, LogprobsBackend)
        assert not isinstance(backend, VocabularyBackend)
        assert not isinstance(backend, AttentionBackend)
        assert not isinstance(backend, ManagedBackend)


def test_a_minimal_backend_declares_nothing_else():
    backend = Plain()
    assert isinstance(backend, VLMBackend)
    for capability in (StreamingBackend, LogprobsBackend, VocabularyBackend, ManagedBackend):
        assert not isinstance(backend, capability)


def test_steered_backend_declares_exactly_what_it_wraps():
    lazy = SteeredBackend(LazyEngine("x"), {"short": ["A"]})
    assert isinstance(lazy, VocabularyBackend) and isinstance(lazy, ManagedBackend)
    plain = SteeredBackend(Plain(), {})
    assert not isinstance(plain, VocabularyBackend) and not isinstance(plain, ManagedBackend)


async def test_recording_backend_records_every_call_and_hides_nothing():
    lazy = RecordingBackend(LazyEngine("x"))
    assert isinstance(lazy, VocabularyBackend) and isinstance(lazy, ManagedBackend)
    small = RecordingBackend(
        FunctionBackend(lambda r: {"short": "C", "cot": "I think B", "s2": "B"}[r.purpose])
    )
    large = RecordingBackend(ScriptedBackend("A"))
    out = (
        await create_mai_graph(small, large)
        .compile()
        .ainvoke({"question": "Which?", "options": ["x", "y", "z"]}, context={})
    )
    assert out["route"] == "transfer"
    assert [r.purpose for r in small.requests] == ["short", "cot", "s2"]
    assert [r.purpose for r, _ in large.calls] == ["short", "answer"]
    request, generation = small.call("cot")
    assert generation.text == "I think B" and request.purpose == "cot"
    with pytest.raises(LookupError, match="0 calls for purpose 'answer'"):
        small.call("answer")
    failing = RecordingBackend(FunctionBackend(lambda r: 1 / 0))
    with pytest.raises(ZeroDivisionError):
        await failing.generate(small.requests[0])
    assert failing.requests == [small.requests[0]] and failing.calls == []


async def test_vocabulary_check_starts_engines_that_have_not_started():
    a, b = LazyEngine("x"), LazyEngine("x")
    assert await same_tokenizer(a, b)
    assert a.started == b.started == 1
    assert not await same_tokenizer(LazyEngine("x"), LazyEngine("y"))
    assert not await same_tokenizer(LazyEngine("x"), Plain())


async def test_lifecycle_helpers_touch_only_managed_backends():
    lazy, plain = LazyEngine("x"), Plain()
    await start_backends(lazy, plain)
    shutdown_backends(lazy, plain)
    assert (lazy.started, lazy.stopped) == (1, 1)


async def test_lifecycle_helpers_walk_drafter_and_chain_lists_once_each():
    d1, d2, m1, m2 = (LazyEngine(str(i)) for i in range(4))
    await start_backends([d1, d2], [m1, m2, m1], Plain())
    shutdown_backends([d1, d2], (m1, m2))
    assert [(b.started, b.stopped) for b in (d1, d2, m1, m2)] == [(1, 1)] * 4


def test_a_plain_backend_runs_every_route():
    small = FunctionBackend(lambda r: {"short": "C", "cot": "I think B", "s2": "B"}[r.purpose])
    g = create_mai_graph(small, Plain()).compile()
    out = g.invoke({"question": "Which?", "options": ["x", "y", "z"]}, context={})
    assert out["route"] == "transfer" and out["large_prob"] is None


def test_cli_backend_names_come_from_the_registry():
    from mai_graph.cli import build_parser

    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    backend = next(a for a in run._actions if a.dest == "backend")
    assert tuple(backend.choices) == BACKENDS


@pytest.mark.parametrize(
    ("module", "missing", "extra"),
    [
        ("mai_graph.backends.vllm", "vllm", "vllm"),
        ("mai_graph.backends.openai", "openai", "openai"),
        ("mai_graph.backends.transformers", "torch", "transformers"),
    ],
)
def test_a_missing_extra_names_what_to_install(monkeypatch, module, missing, extra):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == missing else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=rf'pip install "mai-graph\[{extra}\]"'):
        importlib.import_module(module)
