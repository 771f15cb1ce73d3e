"""Backends declare one capabilities object; wrappers show what they wrap; missing extras fail
clearly; one registry."""

import importlib
import importlib.util
import sys

import pytest

from mai_graph import FunctionBackend, Generation, ScriptedBackend, create_mai_graph
from mai_graph.backends.base import (
    Capabilities,
    GenerationRequest,
    VLMBackend,
    capabilities_of,
    provider_of,
)
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.backends.recording import RecordingBackend
from mai_graph.backends.steered import SteeredBackend
from mai_graph.deploy.select import BACKENDS
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
        caps = capabilities_of(backend)
        assert caps.stream and caps.logprobs and caps.distribution
        assert not (caps.vocabulary or caps.attention or caps.managed)
        assert caps.limits() is None
        assert provider_of(backend) == "mai-graph"


def test_a_minimal_backend_declares_nothing_else():
    backend = Plain()
    assert isinstance(backend, VLMBackend)
    assert capabilities_of(backend) == Capabilities()
    assert provider_of(backend) == "mai-graph"


def test_an_undeclared_backend_gets_what_its_members_offer():
    caps = capabilities_of(LazyEngine("x"))
    assert caps.vocabulary and caps.managed
    assert not (caps.stream or caps.logprobs or caps.attention)

    class Limited(Plain):
        media_limits = {"video": 0, "image": 2}
        provider = ""  # an empty provider is no provider

    assert capabilities_of(Limited()).limits() == {"image": 2, "video": 0}
    assert provider_of(Limited()) == "mai-graph"


def test_a_declared_capabilities_object_wins_over_members():
    class Quiet(LazyEngine):
        capabilities = Capabilities(logprobs=True)
        provider = "mine"

    assert capabilities_of(Quiet("x")) == Capabilities(logprobs=True)
    assert provider_of(Quiet("x")) == "mine"


def test_steered_backend_declares_exactly_what_it_wraps():
    lazy = SteeredBackend(LazyEngine("x"), {"short": ["A"]})
    assert capabilities_of(lazy) == capabilities_of(LazyEngine("x"))
    assert SteeredBackend(Plain(), {}).capabilities == Capabilities()
    scripted = SteeredBackend(ScriptedBackend("A", name="s"), {})
    assert scripted.capabilities == capabilities_of(ScriptedBackend("A")) and scripted.name == "s"
    limited = ScriptedBackend("A")
    limited.media_limits = {"image": 1}
    assert SteeredBackend(limited, {}).capabilities.limits() == {"image": 1}


def test_forced_backend_does_not_stream_what_it_rewrites():
    from mai_graph.backends.recording import ForcedBackend

    forced = ForcedBackend(ScriptedBackend("A"), {"short": "B"}, {})
    assert not capabilities_of(forced).stream
    assert capabilities_of(forced).logprobs


async def test_recording_backend_records_every_call_and_hides_nothing():
    lazy = RecordingBackend(LazyEngine("x"))
    caps = capabilities_of(lazy)
    assert caps.vocabulary and caps.managed
    assert await lazy.vocab_fingerprint() == "vocab-x"  # members pass through
    assert lazy.inner.started == 1
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


def _ask(purpose="short"):
    return GenerationRequest(
        [{"role": "user", "content": [{"type": "text", "text": "Which?"}]}],
        max_tokens=4,
        purpose=purpose,
    )


async def test_a_wrapper_changes_requests_and_generations_on_both_paths():
    import dataclasses

    from mai_graph import WrapperBackend

    class Loud(WrapperBackend):
        def before(self, request):
            return dataclasses.replace(request, max_tokens=2)

        def after(self, request, generation):
            return dataclasses.replace(generation, text=generation.text.upper())

    inner = ScriptedBackend({"short": "b"}, name="m")
    loud = Loud(inner)
    assert (await loud.generate(_ask())).text == "B"
    pieces = []
    assert (await loud.generate_stream(_ask(), pieces.append)).text == "B"
    assert "".join(pieces) == "b"  # the deltas are the inner backend's, as it streamed them
    assert [r.max_tokens for r in inner.requests] == [2, 2]
    assert loud.name == "m" and loud.requests is inner.requests  # members pass through


async def test_a_wrapper_over_a_backend_that_does_not_stream_serves_a_stream_call_whole():
    from mai_graph import WrapperBackend

    wrapped = WrapperBackend(Plain())
    pieces = []
    assert not wrapped.capabilities.stream
    assert (await wrapped.generate_stream(_ask(), pieces.append)).text == "A" and pieces == []


def test_a_wrapper_copied_or_unpickled_half_built_does_not_recurse():
    import copy

    from mai_graph import WrapperBackend

    half = WrapperBackend.__new__(WrapperBackend)  # as copy and pickle make it
    with pytest.raises(AttributeError):
        half.vocab_fingerprint  # noqa: B018
    assert copy.copy(WrapperBackend(Plain())).name == "plain"


async def test_the_graph_instruments_each_backend_once_and_leaves_the_callers_own():
    from mai_graph.instrumented import InstrumentedBackend, instrumented
    from mai_graph.lineup import Lineup

    small, large = ScriptedBackend("A", name="s"), ScriptedBackend("A", name="l")
    lineup = Lineup.of(small, large).instrumented()
    wrapped = [*lineup.drafters, *lineup.chain]
    assert all(isinstance(b, InstrumentedBackend) for b in wrapped)
    assert [b.inner for b in wrapped] == [small, large]  # the caller's backends, unwrapped
    assert instrumented(wrapped[0]) is wrapped[0]  # never wrapped twice
    assert wrapped[1].capabilities == capabilities_of(large) and wrapped[1].name == "l"
    out = (
        await create_mai_graph(small, large)
        .compile()
        .ainvoke({"question": "Which?", "options": ["x", "y"]}, context={})
    )
    assert out["route"] == "agree" and len(small.requests) == len(large.requests) == 1
