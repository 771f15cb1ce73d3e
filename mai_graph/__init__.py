"""mai-graph: multi-agent inference for vision-language models, as a LangGraph graph.

A small and a large VLM of one family answer short; if they agree, done. Otherwise the small
model reasons, its answer is extracted over its cached reasoning (S2), the reasoning is cut to
its most important tokens, and the large model reads it in prefill and answers short.
"""

from mai_graph.answers import UNKNOWN, AnswerKind, answers_match, extract_answer
from mai_graph.api import MAIResult, arun, run
from mai_graph.backends.base import Generation, GenerationRequest, VLMBackend
from mai_graph.backends.fake import FunctionBackend, ScriptedBackend, demo_backends
from mai_graph.context import MAIContext, Policy, SparsifyStrategy
from mai_graph.decisions import MAIDecisionModel
from mai_graph.engines import LineupSpec, ModelSpec, PlanError, build_lineup, load_lineup
from mai_graph.errors import BackendError, ConfigError, ImageError, MAIError
from mai_graph.graph import create_mai_graph
from mai_graph.images import ImageRef, image_ref
from mai_graph.langchain import MAIChatModel, create_mai_chat_graph
from mai_graph.media import VideoRef
from mai_graph.messages import Message
from mai_graph.sources import ImagePolicy
from mai_graph.state import InputState, MAIState, NodeMetrics, OutputState, Route

__all__ = [
    "UNKNOWN",
    "AnswerKind",
    "BackendError",
    "ConfigError",
    "FunctionBackend",
    "Generation",
    "GenerationRequest",
    "ImageError",
    "ImagePolicy",
    "ImageRef",
    "InputState",
    "LineupSpec",
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
