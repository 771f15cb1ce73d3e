"""LangChain / chat-agent integration: messages in, MAI, an ``AIMessage`` out.

- :func:`messages_to_input` reads the question, the image and the options off the last human
  message (text and image content parts: data URLs, file paths, base64 blocks).
- :func:`result_message` turns a run's output into an ``AIMessage`` whose ``usage_metadata``
  and ``response_metadata`` carry tokens, route and latency.
- :func:`create_mai_chat_graph` wraps MAI for ``MessagesState`` graphs (chat agents,
  supervisors): add it as a node, or compile it with a ``name``.
- :class:`MAIChatModel` is a LangChain chat model over MAI: ``invoke``, ``ainvoke``, ``batch``,
  ``stream``, ``astream`` with multimodal messages. It answers questions; it does not call
  tools, follow multi-turn instructions or honour stop sequences.
"""

from __future__ import annotations

import queue
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import ConfigDict, PrivateAttr

from mai_graph.answers import Options
from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError, ImageError
from mai_graph.graph import create_mai_graph
from mai_graph.loop import shared_loop
from mai_graph.nodes._common import Node, RunScope
from mai_graph.result import totals
from mai_graph.state import InputState

__all__ = ["MAIChatModel", "create_mai_chat_graph", "messages_to_input", "result_message"]


def _image_source(part: Mapping[str, Any]) -> str:
    """The image of a content part as a path or data URL."""
    kind = part.get("type")
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
    else:
        url = part.get("url") or part.get("path") or part.get("file_path")
        data = part.get("base64") or (
            part.get("data") if part.get("source_type") == "base64" else None
        )
        if data:
            url = f"data:{part.get('mime_type') or 'image/png'};base64,{data}"
    if not isinstance(url, str) or not url:
        raise ImageError(
            f"image content part has no usable source: {sorted(part)}",
            parameter="messages",
            fix="give the image as a data URL, base64 data or a file path",
        )
    if url.startswith(("http://", "https://")):
        raise ImageError(
            f"remote image URLs are not fetched: {url[:80]}",
            parameter="messages",
            value=url[:80],
            fix="download the image and pass a file path or a data URL",
        )
    return url.removeprefix("file://")


def messages_to_input(
    messages: Sequence[BaseMessage], options: Options | None = None
) -> InputState:
    """The MAI input from the last human message.

    Text parts form the question; the first image part is the image. Options come from
    ``options``, or the message's ``additional_kwargs["options"]``.
    """
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    if human is None:
        raise ConfigError(
            "no human message to answer",
            parameter="messages",
            fix="end the conversation with a HumanMessage holding the question (and image)",
        )
    texts: list[str] = []
    image: str | None = None
    content = human.content
    for part in [content] if isinstance(content, str) else content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") in ("image_url", "image") and image is None:
            image = _image_source(part)
    opts = options if options is not None else human.additional_kwargs.get("options")
    # Every input key is written, None included: on a reused thread nothing is inherited.
    return InputState(
        question=" ".join(t.strip() for t in texts if t.strip()),
        image=image,
        options=(dict(opts) if isinstance(opts, Mapping) else list(opts)) if opts else None,
    )


def result_message(output: Mapping[str, Any], latency_s: float, *, name: str = "mai") -> AIMessage:
    """An ``AIMessage`` with the answer; tokens in ``usage_metadata``, the rest in metadata."""
    metrics = list(output.get("metrics") or [])
    t = totals(metrics)
    return AIMessage(
        content=output["answer"],
        name=name,
        usage_metadata={
            "input_tokens": int(t["prompt_tokens"]),
            "output_tokens": int(t["generated_tokens"]),
            "total_tokens": int(t["prompt_tokens"] + t["generated_tokens"]),
            "input_token_details": {"cache_read": int(t["cached_tokens"])},
        },
        response_metadata={
            "model_provider": "mai-graph",
            "route": output["route"],
            "canonical": output["canonical"],
            "latency_s": latency_s,
            "metrics": metrics,
        },
    )


def create_mai_chat_graph(
    small: VLMBackend, large: VLMBackend, **graph_kwargs: Any
) -> StateGraph[MessagesState, MAIContext, MessagesState, MessagesState]:
    """MAI for ``MessagesState`` graphs: answers the last human message with an ``AIMessage``.

    The MAI graph runs as a subgraph (``subgraphs=True`` streams its events); compile the
    result with a ``name`` to nest it under a supervisor. ``graph_kwargs`` go to
    :func:`create_mai_graph`.
    """
    mai = create_mai_graph(small, large, **graph_kwargs).compile(name="mai")

    async def answer_messages(state: Any, scope: RunScope) -> dict[str, Any]:
        start = time.perf_counter()
        out = await mai.ainvoke(messages_to_input(state["messages"]), context=scope.ctx)
        return {"messages": [result_message(out, time.perf_counter() - start)]}

    builder = StateGraph(MessagesState, context_schema=MAIContext)
    builder.add_node("mai", Node("mai", answer_messages))
    builder.add_edge(START, "mai")
    builder.add_edge("mai", END)
    return builder


class MAIChatModel(BaseChatModel):
    """A LangChain chat model that answers with MAI (a small and a large VLM).

    Works anywhere a chat model does for question answering: chains, ``batch``, streaming,
    agents that do not need tool calls. Not supported: tool calling (``bind_tools``), stop
    sequences, multi-turn instructions (only the last human message is answered).

    Example:
        >>> from mai_graph import ScriptedBackend
        >>> chat = MAIChatModel(small=ScriptedBackend("yes"), large=ScriptedBackend("Yes."))
        >>> chat.invoke("Is the sky blue?").response_metadata["route"]
        'agree'
    """

    small: Any
    """The small model's backend."""
    large: Any
    """The large model's backend."""
    context: dict[str, Any] | None = None
    """MAIContext fields for every call (per call: ``invoke(..., context={...})``)."""
    options: dict[str, str] | list[str] | None = None
    """Multiple-choice options (letter → text, or texts lettered A, B, ...) for every call
    (or per message: ``additional_kwargs``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _graph: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "mai-graph"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"small": self.small.name, "large": self.large.name, "context": self.context}

    def bind_tools(self, *args: Any, **kwargs: Any) -> Any:
        """Not supported: MAI answers questions, it does not call tools."""
        raise NotImplementedError(
            "MAIChatModel does not call tools; use it for question answering, "
            "or give tool calling to another model in your agent"
        )

    def _compiled(self) -> Any:
        if self._graph is None:
            self._graph = create_mai_graph(self.small, self.large).compile(name="mai")
        return self._graph

    def _inputs(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[InputState, MAIContext]:
        if stop:
            raise ConfigError(
                "MAIChatModel does not support stop sequences",
                parameter="stop",
                value=stop,
                fix="drop stop=...; MAI answers short by design",
            )
        ctx = MAIContext(**{**(self.context or {}), **kwargs.pop("context", {})})
        return messages_to_input(messages, kwargs.pop("options", self.options)), ctx

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        inputs, ctx = self._inputs(messages, stop, kwargs)
        start = time.perf_counter()
        out = await self._compiled().ainvoke(inputs, context=ctx)
        message = result_message(out, time.perf_counter() - start)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return shared_loop().run(self._agenerate(messages, stop, **kwargs))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """Stream the large model's final answer as it is written.

        On the transfer route the answer node's tokens stream live; on the early-exit routes
        the answer is known when the run ends and comes as one chunk. The last chunk carries
        usage and route metadata.
        """
        inputs, ctx = self._inputs(messages, stop, kwargs)
        start = time.perf_counter()
        final: dict[str, Any] = {}
        streamed = ""
        async for mode, chunk in self._compiled().astream(
            inputs, context=ctx, stream_mode=["custom", "values"]
        ):
            if mode == "values":
                final = chunk
            elif chunk.get("event") == "token" and chunk.get("node") == "answer":
                streamed += chunk["text"]
                piece = ChatGenerationChunk(message=AIMessageChunk(content=chunk["text"]))
                if run_manager is not None:
                    await run_manager.on_llm_new_token(chunk["text"], chunk=piece)
                yield piece
        message = result_message(final, time.perf_counter() - start)
        rest = message.content[len(streamed) :] if isinstance(message.content, str) else ""
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content=rest,
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
                chunk_position="last",
            )
        )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        chunks: queue.Queue[Any] = queue.Queue()
        done = object()

        async def pump() -> None:
            try:
                async for chunk in self._astream(messages, stop, **kwargs):
                    chunks.put(chunk)
            except BaseException as exc:  # handed to the consuming thread
                chunks.put(exc)
            finally:
                chunks.put(done)

        future = shared_loop().submit(pump())
        try:
            while (item := chunks.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                if run_manager is not None:
                    run_manager.on_llm_new_token(str(item.message.content), chunk=item)
                yield item
        finally:
            future.cancel()
