"""mai-graph: multi-agent inference for vision-language models, as a LangGraph graph.

A small and a large VLM of one family answer short; if they agree, done. Otherwise the small
model reasons, its answer is extracted over its cached reasoning (S2), the reasoning is cut to
its most important tokens, and the large model reads it in prefill and answers short.

The public names load on first use (PEP 562): ``import mai_graph`` costs little, in every
spawned engine process too, and importing the graph does not import LangChain's chat-model
facade. Moved module paths keep working (:mod:`mai_graph._moved`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mai_graph import _moved

_moved.install()

if TYPE_CHECKING:
    from mai_graph.adapters.decisions import MAIDecisionModel
    from mai_graph.adapters.langchain import MAIChatModel, create_mai_chat_graph
    from mai_graph.answers import UNKNOWN, AnswerKind, answers_match, extract_answer
    from mai_graph.api import MAI, MAIResult, arun, run
    from mai_graph.backends.base import Capabilities, Generation, GenerationRequest, VLMBackend
    from mai_graph.backends.fake import FunctionBackend, ScriptedBackend, demo_backends
    from mai_graph.backends.wrapper import WrapperBackend
    from mai_graph.context import MAIContext, Policy, SparsifyStrategy
    from mai_graph.deploy import LineupSpec, ModelSpec, PlanError, build_lineup, load_lineup
    from mai_graph.errors import BackendError, ConfigError, ImageError, MAIError
    from mai_graph.graph import create_mai_graph
    from mai_graph.inputs.images import ImageRef
    from mai_graph.inputs.sources import ImagePolicy, image_ref
    from mai_graph.inputs.video import VideoRef
    from mai_graph.messages import Message
    from mai_graph.state import InputState, MAIState, NodeMetrics, OutputState, Route

_WHERE = {
    "AnswerKind": "mai_graph.answers",
    "answers_match": "mai_graph.answers",
    "arun": "mai_graph.api",
    "BackendError": "mai_graph.errors",
    "Capabilities": "mai_graph.backends.base",
    "build_lineup": "mai_graph.deploy",
    "ConfigError": "mai_graph.errors",
    "create_mai_chat_graph": "mai_graph.adapters.langchain",
    "create_mai_graph": "mai_graph.graph",
    "demo_backends": "mai_graph.backends.fake",
    "extract_answer": "mai_graph.answers",
    "FunctionBackend": "mai_graph.backends.fake",
    "Generation": "mai_graph.backends.base",
    "GenerationRequest": "mai_graph.backends.base",
    "image_ref": "mai_graph.inputs.sources",
    "ImageError": "mai_graph.errors",
    "ImagePolicy": "mai_graph.inputs.sources",
    "ImageRef": "mai_graph.inputs.images",
    "InputState": "mai_graph.state",
    "LineupSpec": "mai_graph.deploy",
    "load_lineup": "mai_graph.deploy",
    "MAI": "mai_graph.api",
    "MAIChatModel": "mai_graph.adapters.langchain",
    "MAIContext": "mai_graph.context",
    "MAIDecisionModel": "mai_graph.adapters.decisions",
    "MAIError": "mai_graph.errors",
    "MAIResult": "mai_graph.api",
    "MAIState": "mai_graph.state",
    "Message": "mai_graph.messages",
    "ModelSpec": "mai_graph.deploy",
    "NodeMetrics": "mai_graph.state",
    "OutputState": "mai_graph.state",
    "PlanError": "mai_graph.deploy",
    "Policy": "mai_graph.context",
    "Route": "mai_graph.state",
    "run": "mai_graph.api",
    "ScriptedBackend": "mai_graph.backends.fake",
    "SparsifyStrategy": "mai_graph.context",
    "UNKNOWN": "mai_graph.answers",
    "VideoRef": "mai_graph.inputs.video",
    "VLMBackend": "mai_graph.backends.base",
    "WrapperBackend": "mai_graph.backends.wrapper",
}
"""Each public name and the module that defines it."""

__all__ = [
    "UNKNOWN",
    "AnswerKind",
    "BackendError",
    "Capabilities",
    "ConfigError",
    "FunctionBackend",
    "Generation",
    "GenerationRequest",
    "ImageError",
    "ImagePolicy",
    "ImageRef",
    "InputState",
    "LineupSpec",
    "MAI",
    "MAIChatModel",
    "MAIDecisionModel",
    "MAIContext",
    "MAIError",
    "MAIResult",
    "MAIState",
    "ModelSpec",
    "Message",
    "NodeMetrics",
    "OutputState",
    "PlanError",
    "Policy",
    "Route",
    "ScriptedBackend",
    "SparsifyStrategy",
    "VLMBackend",
    "VideoRef",
    "WrapperBackend",
    "answers_match",
    "arun",
    "build_lineup",
    "create_mai_chat_graph",
    "create_mai_graph",
    "demo_backends",
    "extract_answer",
    "image_ref",
    "load_lineup",
    "run",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mai_graph' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
