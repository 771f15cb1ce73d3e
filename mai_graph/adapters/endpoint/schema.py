"""The endpoint's request body (OpenAI's chat-completions fields MAI reads) and its errors.

:class:`ChatCompletionRequest` validates ``POST /v1/chat/completions`` (:func:`parse_body`:
the first problem named in a 400); :class:`EndpointError` is a refusal with its HTTP status
and OpenAI's error body, and :func:`as_endpoint_error` maps any exception raised while serving
onto one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from openai.types.shared import ErrorObject
from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from mai_graph.errors import BackendError, ConfigError, ImageError, MAIError
from mai_graph.jsonin import parse_json
from mai_graph.text import without_reprs

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "EndpointError",
    "ImagePart",
    "ImageURL",
    "StreamOptions",
    "TextPart",
    "as_endpoint_error",
    "operator_side",
    "parse_body",
]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Loose):
    """A text content part."""

    type: Literal["text"]
    text: str


class ImageURL(_Loose):
    """The image of an ``image_url`` part: a data URL, base64, or a URL / path the policy allows."""

    url: str
    detail: str | None = None


class ImagePart(_Loose):
    """An image content part."""

    type: Literal["image_url"]
    image_url: ImageURL | str

    @property
    def source(self) -> str:
        """The image's URL, data URL, base64 or path."""
        return self.image_url if isinstance(self.image_url, str) else self.image_url.url


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]
PART: TypeAdapter[TextPart | ImagePart] = TypeAdapter(Part)
"""Validates one content part of the last user message."""


class ChatMessage(_Loose):
    """One message of the conversation.

    Only the last user message is read, so only its content parts must be text or
    ``image_url``.
    """

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(_Loose):
    """``stream_options``: ``include_usage`` adds a last chunk with the run's usage."""

    include_usage: StrictBool = False


class ChatCompletionRequest(_Loose):
    """The body of ``POST /v1/chat/completions`` (OpenAI's fields MAI reads, and ``mai``)."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = None
    stop: str | list[str] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: StrictBool | None = None
    mai: dict[str, Any] | None = None
    """MAI settings (``MAIContext`` fields) and ``options`` (multiple choice)."""


class EndpointError(MAIError):
    """A request the endpoint refuses or could not serve, with its HTTP status.

    Attributes:
        status: The HTTP status code.
        kind: OpenAI's error ``type`` (``invalid_request_error``, ``authentication_error``,
            ``server_error``, ...).
        code: OpenAI's error ``code`` (``model_not_found``, ``invalid_api_key``, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        kind: str = "invalid_request_error",
        code: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.status = status
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
        error = ErrorObject(message=str(self), type=self.kind, param=self.parameter, code=self.code)
        return {"error": error.to_dict()}


def refuse(message: str, param: str, fix: str) -> EndpointError:
    """A 400 for an OpenAI parameter MAI does not support."""
    return EndpointError(message, parameter=param, fix=fix, code="unsupported_parameter")


def as_endpoint_error(exc: BaseException, names: Mapping[str, str] | None = None) -> EndpointError:
    """The HTTP error of an exception raised while serving a request.

    Bad input (settings, images, questions) is a 400 naming the field; a backend failure a 503
    when it may pass (overload, a replica down) and a 502 otherwise; a failure of the
    server's own settings (:func:`operator_side`: the image store full or unwritable, a bad
    variable) a 503 for the image store and a 500 otherwise, naming the setting but not its
    value; anything else a 500 that says no more than that. The caller logs every 5xx with
    its traceback (the client's message points there). Messages name models by ``names``
    (backend name -> served name: local checkpoint paths stay on the server) and carry no
    Python object reprs.

    >>> as_endpoint_error(ConfigError("/srv/models/8b: too long"), {"/srv/models/8b": "mai/large"})
    EndpointError('mai/large: too long')
    >>> as_endpoint_error(ConfigError("bad", parameter="MAI_GRAPH_IMAGE_STORE_MB")).status
    500
    """
    if isinstance(exc, EndpointError):
        return exc
    if isinstance(exc, BackendError):
        pass  # below: its message, with served names
    elif isinstance(exc, MAIError) and operator_side(exc.parameter):
        store = isinstance(exc, ImageError)  # the image store: full, or its disk
        return EndpointError(
            f"the server could not answer: its own setting {exc.parameter} failed; the "
            "server's log has the details",
            status=503 if store else 500,
            kind="server_error",
            code="server_setting_failed",
            fix="retry later, and tell the server's operator if it persists",
        )
    text = without_reprs(str(exc))
    for private, public in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
        # whole names only: "/srv/models/8b" in a message, not "large" in "too large"
        text = re.sub(rf"(?<![\w./-]){re.escape(private)}(?![\w-]|\.\w)", public, text)
    if isinstance(exc, ImageError):
        return EndpointError(text, parameter="messages", code="invalid_image")
    if isinstance(exc, ConfigError):
        param = exc.parameter
        return EndpointError(text, parameter=param, code="invalid_value")
    if isinstance(exc, BackendError):
        return EndpointError(
            text,
            status=503 if exc.transient else 502,
            kind="server_error",
            code="backend_unavailable" if exc.transient else "backend_error",
        )
    return EndpointError(
        "internal error while answering; see the server's log",
        status=500,
        kind="server_error",
        code="internal_error",
    )


def operator_side(parameter: str | None) -> bool:
    """Whether an error naming ``parameter`` is the operator's, not the client's.

    It is when ``parameter`` is a server's environment variable (``MAI_GRAPH_*``) or
    command-line flag: no request can set one.

    >>> operator_side("MAI_GRAPH_IMAGE_DIR"), operator_side("messages"), operator_side(None)
    (True, False, False)
    """
    return bool(parameter) and str(parameter).startswith(("MAI_GRAPH_", "--"))


def parse_body(data: bytes) -> ChatCompletionRequest:
    """The validated request body; the first problem named in a 400.

    >>> parse_body(b'{"model": "mai", "messages": []}')
    Traceback (most recent call last):
    ...
    mai_graph.adapters.endpoint.schema.EndpointError: messages: List should have at least 1 item after validation, not 0
    """  # noqa: E501
    try:  # the parser every door shares: depth, digits, NaN / Infinity refused
        raw = parse_json(data, parameter="body", what="the request body",
                         fix="send the request as OpenAI's chat format, in JSON")  # fmt: skip
    except ConfigError as exc:
        raise EndpointError(
            exc.message, parameter="body", code="invalid_json", fix=exc.fix
        ) from None
    try:
        return ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or "body"
        raise EndpointError(
            f"{param}: {first['msg']}", parameter=param, code="invalid_request"
        ) from None
