"""LangChain / chat-agent integration: messages in, MAI, an ``AIMessage`` out.

- :func:`messages_to_input` reads the question, the images (every one, in order), a video and
  the options off the last human message (text, image and video content parts: data URLs,
  base64 blocks, paths, URLs).
- :func:`result_message` turns a run's output into an ``AIMessage`` whose ``usage_metadata``
  and ``response_metadata`` carry tokens, route and latency.
- :func:`create_mai_chat_graph` wraps MAI for ``MessagesState`` graphs (chat agents,
  supervisors): add it as a node, or compile it with a ``name``.
- :class:`MAIChatModel` is a LangChain chat model over MAI: ``invoke``, ``ainvoke``, ``batch``,
  ``stream``, ``astream`` with multimodal messages. It answers questions; it does not call
  tools, follow multi-turn instructions or honour stop sequences.

Message content is someone else's input: both take images under the untrusted policy by default
(:meth:`~mai_graph.inputs.sources.ImagePolicy.from_env`: data URLs and base64; files only under
``MAI_GRAPH_IMAGE_ROOTS``; http(s) only with ``MAI_GRAPH_IMAGE_URLS=1``); pass
``image_policy`` to choose another.
"""

from __future__ import annotations

import queue
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.chat_models import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import BaseModel, ConfigDict, PrivateAttr

from mai_graph import tracing
from mai_graph.answers import Options, normalize_options
from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError, ImageError
from mai_graph.graph import create_mai_graph
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Lineup
from mai_graph.loop import shared_loop
from mai_graph.nodes._common import MAIRuntime, Node, node_config
from mai_graph.result import reasoning_tokens, totals
from mai_graph.run_stream import run_events
from mai_graph.state import InputState

__all__ = [
    "MAIChatModel",
    "create_mai_chat_graph",
    "image_source",
    "lineup_names",
    "messages_to_input",
    "result_message",
]


def image_source(part: Mapping[str, Any]) -> str:
    """The image of a content part as given (data URL, base64, path or URL).

    Whether it may be read is the graph's image policy's decision, when the run starts.
    """
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
            fix="give the image as a data URL or base64 data",
        )
    return url


def _video_source(part: Mapping[str, Any]) -> str:
    """The video of a content part as given (``video_url`` parts, LangChain ``video`` blocks)."""
    url = part.get("video_url")
    url = url.get("url") if isinstance(url, Mapping) else url
    url = url or part.get("url") or part.get("path") or part.get("file_path")
    data = part.get("base64") or (part.get("data") if part.get("source_type") == "base64" else None)
    if data:
        url = f"data:{part.get('mime_type') or 'video/mp4'};base64,{data}"
    if not isinstance(url, str) or not url:
        raise ImageError(
            f"video content part has no usable source: {sorted(part)}",
            parameter="messages",
            fix="give the video as a data URL or base64 data",
        )
    return url


def messages_to_input(
    messages: Sequence[BaseMessage], options: Options | None = None
) -> InputState:
    """The MAI input from the last human message.

    Text parts form the question; every image part reaches the models, in order (the first as
    ``image``, the rest as ``images``); a video part (``video_url``, or a ``video`` block) is
    the video. Options come from ``options``, or the message's ``additional_kwargs["options"]``.

    Raises:
        ImageError: A media part has no usable source, or the message holds several videos.
    """
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    if human is None:
        raise ConfigError(
            "no human message to answer",
            parameter="messages",
            fix="end the conversation with a HumanMessage holding the question (and image)",
        )
    texts: list[str] = []
    images: list[str] = []
    videos: list[str] = []
    content = human.content
    for part in [content] if isinstance(content, str) else content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") in ("image_url", "image"):
            images.append(image_source(part))
        elif part.get("type") in ("video_url", "video"):
            videos.append(_video_source(part))
        else:  # audio, files, ...: never dropped silently
            raise ConfigError(
                f"content part of type {str(part.get('type'))!r:.40} is not supported: MAI "
                "reads text, image and video parts",
                parameter="messages",
                value=part.get("type"),
                fix="send the question as text with image (or video) parts",
            )
    if len(videos) > 1:
        raise ImageError(
            f"a message may carry one video, got {len(videos)}",
            parameter="messages",
            value=len(videos),
            fix="send one video (or its frames as images of separate questions)",
        )
    opts = options if options is not None else human.additional_kwargs.get("options")
    # Every input key is written, None included: on a reused thread nothing is inherited.
    inputs = InputState(
        question=" ".join(t.strip() for t in texts if t.strip()),
        image=images[0] if images else None,
        options=normalize_options(opts),  # one validation for every door: "a,b" or 5 refused
    )
    if len(images) > 1:
        inputs["images"] = list[ImageRef | str](images[1:])
    if videos:
        inputs["video"] = videos[0]
    return inputs


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
            "output_token_details": {"reasoning": reasoning_tokens(metrics)},
        },
        response_metadata={
            "model_provider": "mai-graph",
            "route": output["route"],
            "canonical": output["canonical"],
            "latency_s": latency_s,
            "metrics": metrics,
        },
    )


def lineup_names(models: Any) -> str:
    """A backend's name, or the names of a list of them (drafters, a chain) joined by commas."""
    if isinstance(models, list | tuple):
        return ",".join(m.name for m in models)
    return str(models.name)


def create_mai_chat_graph(
    small: VLMBackend | Sequence[VLMBackend],
    large: VLMBackend | Sequence[VLMBackend],
    *,
    name: str = "mai",
    image_policy: ImagePolicy | None = None,
    **graph_kwargs: Any,
) -> StateGraph[MessagesState, MAIContext, MessagesState, MessagesState]:
    """MAI for ``MessagesState`` graphs: answers the last human message with an ``AIMessage``.

    The node (named ``name``, as is the reply's ``AIMessage.name``) calls a
    :class:`MAIChatModel` with its own config, so ``stream_mode="messages"`` yields the
    answer's tokens and tracing callbacks see one nested run. Compile the result with a
    ``name`` to nest it under a supervisor. ``graph_kwargs`` go to :func:`create_mai_graph`.
    Images in messages follow ``image_policy`` (default: :meth:`ImagePolicy.from_env`, the
    untrusted policy).
    """
    policy = image_policy or ImagePolicy.from_env()
    mai = create_mai_graph(small, large, image_policy=policy, **graph_kwargs)
    chat = MAIChatModel(small=small, large=large, name=name, graph=mai, image_policy=policy)

    async def answer_messages(state: Any, runtime: MAIRuntime) -> dict[str, Any]:
        settings = runtime.context.model_dump(exclude_defaults=True)
        reply = await chat.ainvoke(state["messages"], node_config(), context=settings)
        return {"messages": [reply]}

    builder = StateGraph(MessagesState, context_schema=MAIContext)
    builder.add_node(name, Node(name, answer_messages))
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder


def _structured_target(schema: Any) -> tuple[str, dict[str, str], str]:
    """(field, options, answer kind) of a schema MAI can answer; ConfigError otherwise."""
    works = (
        "a pydantic model with one field typed Literal[...] of strings (multiple choice) "
        "or bool (yes/no)"
    )
    fields = getattr(schema, "model_fields", None)
    if not isinstance(schema, type) or not issubclass(schema, BaseModel) or not fields:
        raise ConfigError(
            f"with_structured_output cannot answer with {schema!r}",
            parameter="schema",
            value=schema,
            fix=f"pass {works}",
        )
    if len(fields) != 1:
        raise ConfigError(
            f"with_structured_output needs a single field, {schema.__name__} has {list(fields)}",
            parameter="schema",
            value=list(fields),
            fix=f"pass {works}",
        )
    ((name, info),) = fields.items()
    if info.annotation is bool:
        return name, {}, "yes_no"
    values = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
    if len(values) >= 2 and all(isinstance(v, str) for v in values):
        return name, normalize_options(list(values)) or {}, "choice"
    raise ConfigError(
        f"with_structured_output cannot answer {schema.__name__}.{name}: {info.annotation}",
        parameter="schema",
        value=str(info.annotation),
        fix=f"pass {works}",
    )


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
    """The small model's backend, or several drafter backends."""
    large: Any
    """The large model's backend, or a chain of larger backends, smallest first."""
    context: dict[str, Any] | None = None
    """MAIContext fields for every call (per call: ``invoke(..., context={...})``)."""
    options: dict[str, str] | list[str] | None = None
    """Multiple-choice options (letter → text, or texts lettered A, B, ...) for every call
    (or per message: ``additional_kwargs``)."""
    graph: Any = None
    """The MAI ``StateGraph`` to answer with (default: ``create_mai_graph(small, large)`` with
    ``image_policy``)."""
    image_policy: ImagePolicy | None = None
    """Which images messages may carry (default: :meth:`ImagePolicy.from_env`: data URLs and
    base64, files only under ``MAI_GRAPH_IMAGE_ROOTS``). Not used when ``graph`` is given."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _graph: Any = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        """Check the backends first (pydantic would wrap the error in its own).

        Raises:
            ConfigError: ``small`` or ``large`` is not a backend (or a list of them).
        """
        small: Any = data.get("small")  # None: refused, naming the field
        large: Any = data.get("large")
        Lineup.of(small, large)
        super().__init__(**data)

    @property
    def _llm_type(self) -> str:
        return "mai-graph"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "small": lineup_names(self.small),
            "large": lineup_names(self.large),
            "context": self.context,
        }

    def bind_tools(self, *args: Any, **kwargs: Any) -> Any:
        """Not supported: MAI answers questions, it does not call tools."""
        raise NotImplementedError(
            "MAIChatModel does not call tools; use it for question answering, "
            "or give tool calling to another model in your agent"
        )

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """Tracing metadata, as LangChain chat models report it."""
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "mai-graph"
        params["ls_model_name"] = f"{lineup_names(self.small)}+{lineup_names(self.large)}"
        return params

    def with_structured_output(  # type: ignore[override]
        self, schema: Any, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """A runnable that answers as a typed result, for what MAI can answer.

        ``schema`` is a pydantic model with one field, typed ``Literal[...]`` of strings (the
        question becomes multiple choice over those values) or ``bool`` (a yes/no question).
        The result is an instance of the model; an answer that cannot be read raises
        ``OutputParserException`` (or is reported in ``parsing_error`` with ``include_raw``).

        Raises:
            ConfigError: For any other schema (free-form JSON, several fields, nested types):
                MAI answers short questions, it does not write JSON.
        """
        if kwargs:
            raise ConfigError(
                f"unsupported with_structured_output options {sorted(kwargs)}",
                parameter="with_structured_output",
                fix="pass only the schema (and include_raw)",
            )
        field, options, kind = _structured_target(schema)

        async def answer(messages: Any, config: RunnableConfig) -> Any:
            reply = await self.ainvoke(
                messages, config, context={"answer_kind": kind}, options=options or None
            )
            canonical = reply.response_metadata["canonical"]
            try:
                if kind == "yes_no" and canonical in ("yes", "no"):
                    parsed: Any = schema(**{field: canonical == "yes"})
                elif kind == "choice" and canonical in options:
                    parsed = schema(**{field: options[canonical]})
                else:
                    raise OutputParserException(
                        f"MAI's answer {reply.content!r} is not one of the schema's values",
                        llm_output=str(reply.content),
                    )
            except OutputParserException as exc:
                if not include_raw:
                    raise
                return {"raw": reply, "parsed": None, "parsing_error": exc}
            if include_raw:
                return {"raw": reply, "parsed": parsed, "parsing_error": None}
            return parsed

        def answer_sync(messages: Any, config: RunnableConfig) -> Any:
            return shared_loop().run(answer(messages, config))

        return RunnableLambda(answer_sync, afunc=answer, name="mai_structured")

    def _compiled(self) -> Any:
        if self._graph is None:
            policy = self.image_policy or ImagePolicy.from_env()
            builder = self.graph or create_mai_graph(self.small, self.large, image_policy=policy)
            self._graph = builder.compile(name=self.name or "mai")
        return self._graph

    def _child_config(self, run_manager: Any) -> RunnableConfig:
        """The inner graph's config: its runs nest under this chat model's run."""
        if run_manager is None:
            return {}
        child = CallbackManager(handlers=[], parent_run_id=run_manager.run_id)
        child.set_handlers(run_manager.inheritable_handlers)
        child.add_tags(run_manager.inheritable_tags)
        child.add_metadata(run_manager.inheritable_metadata)
        return {"callbacks": child}

    def _reply_name(self) -> str:
        return self.name or "mai"

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
        with tracing.run_span("chat_model", ctx) as span:
            out = await self._compiled().ainvoke(
                inputs, self._child_config(run_manager), context=ctx
            )
            tracing.finish_run(span, out)
        message = result_message(out, time.perf_counter() - start, name=self._reply_name())
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return shared_loop().run(
            self._agenerate(messages, stop, run_manager, **kwargs)  # type: ignore[arg-type]
        )

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
        # LangChain's stream / astream report each chunk to the callbacks themselves (and pass
        # no run manager here); only a run manager given explicitly parents the inner graph.
        async for piece in self._chunks(messages, stop, run_manager, kwargs):
            yield piece

    async def _chunks(
        self, messages: list[BaseMessage], stop: list[str] | None, parent: Any, kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The answer's chunks; the inner graph's runs nest under ``parent`` (a run manager)."""
        inputs, ctx = self._inputs(messages, stop, kwargs)
        start = time.perf_counter()
        final: dict[str, Any] = {}
        streamed = ""
        async for mode, chunk in run_events(
            self._compiled(), inputs, ctx, door="chat_model", config=self._child_config(parent)
        ):
            if mode == "values":
                final = chunk
            elif chunk.get("event") == "token" and chunk.get("node") == "answer":
                streamed += chunk["text"]
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content=chunk["text"], name=self._reply_name())
                )
        message = result_message(final, time.perf_counter() - start, name=self._reply_name())
        rest = message.content[len(streamed) :] if isinstance(message.content, str) else ""
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content=rest,
                name=self._reply_name(),
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
                async for chunk in self._chunks(messages, stop, run_manager, kwargs):
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
                yield item
        finally:
            future.cancel()
