"""Each model call of a run as a LangChain chat-model run, for LangSmith and other callbacks.

A graph node's config carries the run's callback manager. When it has handlers (a LangSmith
tracer, a user's handler), each model call is reported to them as a child ``llm`` run of its
node: ``on_chat_model_start`` with the ``ls_*`` metadata LangSmith reads (``ls_provider``,
``ls_model_name``, ``ls_model_type``, ``ls_temperature``, ``ls_max_tokens``) and
``on_llm_end`` with an ``AIMessage`` whose ``usage_metadata`` holds the call's input, output
and cache-read tokens, so LangSmith shows tokens (and cost) per model. Without handlers this
costs one check.

The runs are tagged ``nostream``: LangGraph's ``messages`` stream mode keeps streaming the
graph's own answer messages, not every inner call. Images appear as their hash, never bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mai_graph.backends.base import provider_of

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from mai_graph.backends.base import Generation, GenerationRequest

__all__ = ["end_call", "fail_call", "start_call"]

TAGS = ["nostream", "mai:model_call"]


def _handlers(config: RunnableConfig | None) -> Any:
    if not config:
        return None
    callbacks = config.get("callbacks")
    if callbacks is None:
        return None
    if isinstance(callbacks, list):
        return callbacks or None
    return callbacks if getattr(callbacks, "handlers", None) else None


def _messages(request: GenerationRequest) -> list[Any]:
    """The request's messages as LangChain messages; media parts name their hash only."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    kinds = {"system": SystemMessage, "assistant": AIMessage}
    out = []
    for message in request.messages:
        parts = []
        for part in message["content"]:
            if part["type"] == "text":
                parts.append(part["text"])
            else:
                media: Any = part.get("image") or part.get("video") or {}
                parts.append(f"[{part['type']} {str(media.get('sha256', ''))[:12]}]")
        out.append(kinds.get(message["role"], HumanMessage)(content="\n".join(parts)))
    return out


async def start_call(
    config: RunnableConfig | None,
    backend: Any,
    request: GenerationRequest,
    node: str,
    role: str,
) -> Any:
    """Report a model call's start to the node's callbacks; returns its run manager or None."""
    callbacks = _handlers(config)
    if callbacks is None:
        return None
    from langchain_core.callbacks.manager import AsyncCallbackManager

    model = str(getattr(backend, "name", "model"))
    metadata = {
        "ls_provider": provider_of(backend),
        "ls_model_name": model,
        "ls_model_type": "chat",
        "ls_temperature": request.temperature,
        "ls_max_tokens": request.max_tokens,
        "mai_node": node,
        "mai_role": role,
        "mai_purpose": request.purpose,
    }
    params = {"model": model, "max_tokens": request.max_tokens, "temperature": request.temperature}
    manager = AsyncCallbackManager.configure(
        inheritable_callbacks=callbacks, local_tags=TAGS, local_metadata=metadata
    )
    (run,) = await manager.on_chat_model_start(
        {"name": model, "id": ["mai_graph", "model_call"]},
        [_messages(request)],
        invocation_params=params,
        name=f"{role} {node}",
    )
    return run


async def end_call(run: Any, gen: Generation, purpose: str = "generate") -> None:
    """Report a finished model call: its text and token usage (reasoning for ``cot``)."""
    if run is None:
        return
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    cached = gen.cached_tokens or 0
    usage = {
        "input_tokens": gen.prompt_tokens,
        "output_tokens": gen.generated_tokens,
        "total_tokens": gen.prompt_tokens + gen.generated_tokens,
        "input_token_details": {"cache_read": cached},
    }
    if purpose == "cot":
        usage["output_token_details"] = {"reasoning": gen.generated_tokens}
    message = AIMessage(
        content=gen.text,
        usage_metadata=usage,  # type: ignore[arg-type]
        response_metadata={"model_name": gen.model, "finish_reason": gen.finish_reason},
    )
    token_usage = {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.generated_tokens,
        "total_tokens": gen.prompt_tokens + gen.generated_tokens,
    }
    await run.on_llm_end(
        LLMResult(
            generations=[[ChatGeneration(message=message)]],
            llm_output={"model_name": gen.model, "token_usage": token_usage},
        )
    )


async def fail_call(run: Any, exc: BaseException) -> None:
    """Report a failed model call."""
    if run is not None:
        await run.on_llm_error(exc)
