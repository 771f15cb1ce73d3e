"""Hostile input for every door, beside the shared input table of tests/bad_inputs.py.

- :data:`SETTINGS`: bad run settings, sent through the Python API (``context=``), the CLI
  (``--set``) and the endpoint (``mai``, on a server that opens every setting);
- :data:`WIRE`: requests to the endpoint that a careless or hostile client sends (bodies,
  headers, OpenAI fields MAI cannot honour): each a 4xx naming the field, never a 500;
- :data:`CHAT`: messages and options given to ``MAIChatModel``;
- :data:`CLI`: command lines, each an exit status 2 with the problem named and no traceback.

Every case says what must happen; tests/adapters/test_hostile_doors.py runs them, and after each the
door must still answer a good question.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

QUESTION = "Which colour is the large shape in the image?"
OPTIONS = ["red", "blue"]


# -- run settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """A bad value of one ``MAIContext`` field, and the words its refusal must hold."""

    field: str
    value: Any
    match: str

    @property
    def id(self) -> str:
        return f"{self.field}={self.value!r:.30}"


SETTINGS = (
    Setting("keep_ratio", 0, r"keep_ratio must be in \(0, 1\]"),
    Setting("keep_ratio", 1.5, r"keep_ratio must be in \(0, 1\]"),
    Setting("keep_ratio", -0.2, r"keep_ratio must be in \(0, 1\]"),
    Setting("keep_ratio", "lots", "keep_ratio"),
    Setting("keep_mass", 0, "keep_mass"),
    Setting("keep_mass", 2, "keep_mass"),
    Setting("temperature", -1, "temperature"),
    Setting("temperature", 99, "temperature"),
    Setting("temperature", "hot", "temperature"),
    Setting("seed", 10**40, "seed must be an integer"),
    Setting("seed", -5, "seed must be an integer"),
    Setting("seed", 1.5, "seed"),
    Setting("gate", "sometimes", "gate must be one of"),
    Setting("gate", "", "gate must be one of"),
    Setting("policy", "fastest", "policy must be one of"),
    Setting("sparsify", "magic", "sparsify must be one of"),
    Setting("answer_kind", "poem", "answer_kind must be one of"),
    Setting("gate_min_prob", 1.5, "gate_min_prob"),
    Setting("gate_min_prob", -0.1, "gate_min_prob"),
    Setting("cot_max_tokens", 0, "cot_max_tokens"),
    Setting("cot_max_tokens", 10**9, "cot_max_tokens"),
    Setting("short_max_tokens", 0, "short_max_tokens"),
    Setting("s2_max_tokens", -3, "s2_max_tokens"),
    Setting("max_transfer_tokens", 0, "max_transfer_tokens"),
    Setting("drafts", 0, "drafts"),
    Setting("drafts", 17, "drafts"),
    Setting("transfer_drafts", 9, "transfer_drafts"),
    Setting("draft_temperature", 0, "draft_temperature"),
    Setting("system_prompt", "x" * 20_001, "at most 20000 characters"),
    Setting("cot_instruction", "Think \ud800 hard", "valid string"),
    Setting("s2_exit", "maybe", "s2_exit"),
    Setting("whole_words", [1], "whole_words"),
    Setting("review", "yes please", "review"),
)


# -- the endpoint's wire -----------------------------------------------------------------------


def _text(content: Any = "Which colour is the square?", **fields: Any) -> dict[str, Any]:
    return {"model": "mai", "messages": [{"role": "user", "content": content}], **fields}


def _with_image(url: Any) -> dict[str, Any]:
    return _text([{"type": "text", "text": "Which colour?"},
                  {"type": "image_url", "image_url": {"url": url}}])  # fmt: skip


def _nested(depth: int) -> bytes:
    return b'{"model": "mai", "messages": ' + b"[" * depth + b"]" * depth + b"}"


@dataclass(frozen=True)
class Wire:
    """One request to ``POST /v1/chat/completions`` and the error it must give."""

    id: str
    body: Any
    """A JSON-able body, or raw bytes."""
    status: int
    match: str
    """A regular expression the error message must contain."""
    param: str | None = None
    """The error's ``param``, when the request names one field at fault."""
    headers: dict[str, str] = field(default_factory=dict)
    authorized: bool = True
    declared: int | None = None
    """Sent over a bare socket with this ``Content-Length`` whatever the body's size (a
    client that lies about it; HTTP clients refuse to)."""
    served: bool = False
    """Sent to a real server (uvicorn as ``mai-graph serve`` configures it): the transport's
    limits, which an app served in process does not have."""


WIRE = (
    Wire("not JSON", b"{this is not json", 400, "not valid JSON", "body"),
    Wire("empty body", b"", 400, "not valid JSON", "body"),
    Wire("a JSON string", b'"hello"', 400, "body|Input should be", None),
    Wire("a JSON list", b"[1, 2, 3]", 400, "body|Input should be", None),
    Wire("JSON null", b"null", 400, "body|Input should be", None),
    Wire("JSON nested 10,000 deep", _nested(10_000), 400, "nests too deep|messages", None),
    Wire("JSON nested 100 deep", _nested(100), 400, "nests too deep", "body"),
    Wire("a 5,000-digit integer", b'{"model": "mai", "seed": ' + b"9" * 5000 + b', "messages": []}',
         400, "at most 100 digits", "body"),
    Wire("NaN in the body", b'{"model": "mai", "temperature": NaN, "messages": []}', 400,
         "NaN", "body"),
    Wire("invalid UTF-8", b'{"model": "mai", "messages": "\xff\xfe"}', 400, "not valid JSON",
         "body"),
    Wire("no model", {"messages": [{"role": "user", "content": "hi"}]}, 400, "model", "model"),
    Wire("model of another type", _text(model=5), 400, "model", "model"),
    Wire("unknown model", _text(model="gpt-4"), 404, "does not exist here", "model"),
    Wire("no messages", {"model": "mai"}, 400, "messages", "messages"),
    Wire("empty messages", {"model": "mai", "messages": []}, 400, "messages", "messages"),
    Wire("messages as a string", {"model": "mai", "messages": "hi"}, 400, "messages"),
    Wire("a message without a role", {"model": "mai", "messages": [{"content": "hi"}]}, 400,
         "role", "messages.0.role"),
    Wire("an unknown role", {"model": "mai", "messages": [{"role": "wizard", "content": "x"}]},
         400, "role"),
    Wire("no user message", {"model": "mai", "messages": [{"role": "system", "content": "x"}]},
         400, "user message"),
    Wire("content as a number", _text(42), 400, "content"),
    Wire("content parts not objects", _text(["just text"]), 400, "content|part"),
    Wire("a part without a type", _text([{"text": "hi"}]), 400, "type|part"),
    Wire("an audio part", _text([{"type": "text", "text": "Hear this?"},
                                 {"type": "input_audio", "input_audio": {"data": "AAAA",
                                                                         "format": "wav"}}]),
         400, "input_audio"),
    Wire("a file part", _text([{"type": "text", "text": "Read this?"},
                               {"type": "file", "file": {"file_data": "AAAA"}}]), 400, "file"),
    Wire("a text part whose text is a number", _text([{"type": "text", "text": 7}]), 400, "text"),
    Wire("only an image, no question", _text([{"type": "image_url",
                                               "image_url": {"url": "data:image/png;base64,AA"}}]),
         400, "question|image"),
    Wire("empty question text", _text(""), 400, "no question text"),
    Wire("whitespace question", _text("  \n\t "), 400, "no question text|non-empty string"),
    Wire("a lone surrogate in the question", _text("Is it \ud800 red?"), 400,
         "unpaired surrogate"),
    Wire("a question over the cap", _text("x" * 100_001), 400, "over the limit"),
    Wire("image_url without a url", _text([{"type": "text", "text": "q?"},
                                           {"type": "image_url", "image_url": {}}]), 400, "url"),
    Wire("image url of another type", _with_image(12), 400, "url"),
    Wire("a server path as image", _with_image("/etc/passwd"), 400, "not allowed"),
    Wire("a relative path as image", _with_image("../../secret.png"), 400, "not allowed"),
    Wire("a file URL as image", _with_image("file:///etc/hostname"), 400, "not allowed"),
    Wire("an http URL as image", _with_image("http://169.254.169.254/latest"), 400,
         "not fetched"),
    Wire("a data URL of text", _with_image("data:image/png;base64,aGVsbG8gd29ybGQ="), 400,
         "cannot decode"),
    Wire("a data URL that is not base64", _with_image("data:image/png;base64,@@@!!"), 400,
         "not valid base64"),
    Wire("an empty data URL", _with_image("data:image/png;base64,"), 400, "empty"),
    Wire("17 images", _text([{"type": "text", "text": "q?"}] + [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}] * 17), 400,
         "17 images, over the limit of 16"),
    Wire("stream of another type", _text(stream="yes"), 400, "stream"),
    Wire("stream_options of another type", _text(stream=True, stream_options=[1]), 400,
         "stream_options"),
    Wire("n of 3", _text(n=3), 400, "n", "n"),
    Wire("tools", _text(tools=[{"type": "function", "function": {"name": "f"}}]), 400,
         "tools", "tools"),
    Wire("a JSON response format", _text(response_format={"type": "json_object"}), 400,
         "response_format", "response_format"),
    Wire("logprobs", _text(logprobs=True), 400, "logprobs", "logprobs"),
    Wire("stop sequences", _text(stop=["\n"]), 400, "stop", "stop"),
    Wire("max_tokens 0", _text(max_tokens=0), 400, "max_tokens", "max_tokens"),
    Wire("max_tokens negative", _text(max_tokens=-5), 400, "max_tokens", "max_tokens"),
    Wire("max_tokens a string", _text(max_tokens="many"), 400, "max_tokens", "max_tokens"),
    Wire("temperature a string", _text(temperature="hot"), 400, "temperature", "temperature"),
    Wire("temperature 1000", _text(temperature=1000), 400, "temperature", "temperature"),
    Wire("seed 10^40", _text(seed=10**40), 400, "seed", "seed"),
    Wire("mai of another type", _text(mai="fast"), 400, "mai", "mai"),
    Wire("mai with an unknown setting", _text(mai={"kep_ratio": 0.3}), 400, "kep_ratio"),
    Wire("mai options as a string", _text(mai={"options": "red,blue"}), 400,
         "options must be a list", "mai.options"),
    Wire("mai options as a number", _text(mai={"options": 5}), 400, "options must be a list",
         "mai.options"),
    Wire("mai options duplicated", _text(mai={"options": ["red", "Red."]}), 400,
         "same text", "mai.options"),
    Wire("mai options naming each other", _text(mai={"options": ["B", "A"]}), 400,
         "could mean either", "mai.options"),
    Wire("mai options 27", _text(mai={"options": [f"o{i}" for i in range(27)]}), 400,
         "2 to 26 options", "mai.options"),
    Wire("review asked of the endpoint", _text(mai={"review": True}), 400, "review"),
    Wire("no API key", _text(), 401, "missing API key", authorized=False),
    Wire("a wrong API key", _text(), 401, "wrong API key", authorized=False,
         headers={"Authorization": "Bearer sk-wrong"}),
    Wire("a key in the wrong scheme", _text(), 401, "API key", authorized=False,
         headers={"Authorization": "Basic c2stdGVzdA=="}),
    Wire("a body declared over the cap", b"{}", 413, "over the limit",
         declared=200 * 1024 * 1024),
    Wire("a head over 8 KiB", _text(), 431, "head .* over the limit of 8,192 bytes", "headers",
         headers={"X-Filler": "x" * 10_000}, served=True),
    Wire("a head over 8 KiB, no key", _text(), 431, "head .* over the limit", "headers",
         headers={"X-Filler": "x" * 10_000}, authorized=False, served=True),
    Wire("1,000 headers, no key", _text(), 431, "head .* over the limit", "headers",
         headers={f"x-h{i}": "1" for i in range(1_000)}, authorized=False, served=True),
)  # fmt: skip


# -- the chat model --------------------------------------------------------------------------


@dataclass(frozen=True)
class Chat:
    """Messages (and options) given to ``MAIChatModel.ainvoke``, and the error they must give."""

    id: str
    messages: Callable[[str], list[Any]]
    """A good image's data URL -> the messages."""
    error: str
    """The error type's name (``ConfigError``, ``ImageError``, ``ImageAccessError``)."""
    match: str
    options: Any = None


def _human(*parts: Any, **kwargs: Any) -> list[Any]:
    from langchain_core.messages import HumanMessage

    return [HumanMessage(content=list(parts), **kwargs)]


def _text_part(text: str = QUESTION) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _video_part(url: str) -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": url}}


def _ai_only(url: str) -> list[Any]:
    from langchain_core.messages import AIMessage, SystemMessage

    return [SystemMessage(content="Be brief."), AIMessage(content="Hello!")]


CHAT = (
    Chat("no human message", _ai_only, "ConfigError", "no human message"),
    Chat("no messages at all", lambda u: [], "ConfigError", "no human message"),
    Chat("an empty question", lambda u: _human(_text_part(""), _image_part(u)), "ConfigError",
         "non-empty string"),
    Chat("a lone surrogate", lambda u: _human(_text_part("Red\udfff?"), _image_part(u)),
         "ConfigError", "unpaired surrogate"),
    Chat("options as a comma string", lambda u: _human(_text_part(), _image_part(u)),
         "ConfigError", "options must be a list", options="red,blue"),
    Chat("options as a number", lambda u: _human(_text_part(), _image_part(u)), "ConfigError",
         "options must be a list", options=5),
    Chat("options as an iterator", lambda u: _human(_text_part(), _image_part(u)),
         "ConfigError", "got list_iterator. Fix", options=iter(["red", "blue"])),
    Chat("duplicate options", lambda u: _human(_text_part(), _image_part(u)), "ConfigError",
         "same text", options=["red", " RED "]),
    Chat("options in additional_kwargs as a string",
         lambda u: _human(_text_part(), _image_part(u), additional_kwargs={"options": "a,b"}),
         "ConfigError", "options must be a list"),
    Chat("an audio part", lambda u: _human(_text_part(), {"type": "audio", "base64": "AAAA",
                                                          "mime_type": "audio/wav"}),
         "ConfigError", "'audio' is not supported"),
    Chat("a file part", lambda u: _human(_text_part(), {"type": "file", "base64": "AAAA",
                                                        "mime_type": "application/pdf"}),
         "ConfigError", "'file' is not supported"),
    Chat("a server path as image", lambda u: _human(_text_part(), _image_part("/etc/passwd")),
         "ImageAccessError", "not allowed"),
    Chat("a file URL as image", lambda u: _human(_text_part(),
                                                 _image_part("file:///etc/hostname")),
         "ImageAccessError", "not allowed"),
    Chat("an http URL as image", lambda u: _human(_text_part(),
                                                  _image_part("http://127.0.0.1:1/x.png")),
         "ImageAccessError", "not fetched"),
    Chat("a data URL of text", lambda u: _human(
        _text_part(), _image_part("data:image/png;base64,aGVsbG8gd29ybGQ=")), "ImageError",
         "cannot decode"),
    Chat("two videos", lambda u: _human(_text_part(), _video_part(u), _video_part(u)),
         "ImageError", "one video"),
    Chat("17 images", lambda u: _human(_text_part(), *[_image_part(u)] * 17), "ImageError",
         "17 images, over the limit of 16"),
    Chat("an image part without a source", lambda u: _human(_text_part(), {"type": "image"}),
         "ImageError", "image"),
    Chat("a question over the cap", lambda u: _human(_text_part("x" * 100_001), _image_part(u)),
         "ConfigError", "over the limit"),
    Chat("options alike but for full-width letters", lambda u: _human(_text_part(),
                                                                      _image_part(u)),
         "ConfigError", "same text to a reader.*look-alike", options=["red", "ｒｅｄ"]),
    Chat("options alike but for a Cyrillic letter", lambda u: _human(_text_part(), _image_part(u)),
         "ConfigError", "look-alike or invisible", options=["red", "r\u0435d", "blue"]),
    Chat("options alike but for a zero-width space", lambda u: _human(_text_part(),
                                                                      _image_part(u)),
         "ConfigError", "look-alike or invisible", options=["blue", "red", "r\u200bed"]),
)  # fmt: skip


# -- the command line ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cli:
    """A command line (``{tmp}`` and ``{image}`` filled in) and what stderr must say."""

    id: str
    argv: tuple[str, ...]
    match: str
    status: int = 2


_DIGITS = "1" * 5_000
"""An integer Python refuses to read (over 4,300 digits)."""
_DEEP = "[" * 50_000 + "]" * 50_000
"""JSON nested deeper than Python's parser goes."""
_PLANNED = ("plan", "--small", "Qwen/Qwen3-VL-2B-Instruct", "--large", "Qwen/Qwen3-VL-8B-Instruct")
"""``mai-graph plan`` of a shipped pair's configs (offline)."""

CLI = (
    Cli("no question", ("run",), "question"),
    Cli("an unknown command", ("fly",), "invalid choice"),
    Cli("an unknown backend", ("run", "q?", "--backend", "tpu"), "invalid choice"),
    Cli("an unknown setting", ("run", "q?", "--set", "kep_ratio=0.3"), "kep_ratio"),
    Cli("a setting without a value", ("run", "q?", "--set", "keep_ratio"), "FIELD=VALUE"),
    Cli("a setting out of range", ("run", "q?", "--set", "keep_ratio=7"), "keep_ratio must be"),
    Cli("--keep-ratio not a number", ("run", "q?", "--keep-ratio", "half"), "keep-ratio"),
    Cli("--options not JSON", ("run", "q?", "--options", "{red"), "options"),
    Cli("--options a JSON string", ("run", "q?", "--options", '"red,blue"'),
        "options must be a list"),
    Cli("--option and --options", ("run", "q?", "--option", "a", "--options", '["a","b"]'),
        "not allowed with"),
    Cli("an image that does not exist", ("run", "q?", "--image", "{tmp}/nope.png"),
        "not found"),
    Cli("an image that is a folder", ("run", "q?", "--image", "{tmp}"), "not a file"),
    Cli("an image that is not one", ("run", "q?", "--image", "{tmp}/notes.png"),
        "cannot decode"),
    Cli("a context file that is a folder", ("run", "q?", "--context", "{tmp}"), "context"),
    Cli("a context file that does not exist", ("run", "q?", "--context", "{tmp}/no.json"),
        "context"),
    Cli("a context file of bad JSON", ("run", "q?", "--context", "{tmp}/notes.png"), "context"),
    Cli("a video that does not exist", ("run", "q?", "--video", "{tmp}/nope.mp4"), "not found"),
    Cli("serve on port 99999", ("serve", "--port", "99999"), "1-65535|port"),
    Cli("serve on port 0", ("serve", "--port", "0"), "1-65535|port"),
    Cli("serve with a negative shutdown timeout", ("serve", "--shutdown-timeout", "-1"),
        "shutdown timeout"),
    Cli("serve with max-preparing 0", ("serve", "--max-preparing", "0"), "max_preparing"),
    Cli("serve publicly without a key", ("serve", "--host", "0.0.0.0"), "without an API key"),
    Cli("synth-data with a huge size", ("synth-data", "{tmp}/syn", "--size", "100000"),
        "size must be an integer from 64 to 4096"),
    Cli("synth-data onto a file", ("synth-data", "{tmp}/notes.png"), "synth|folder|file"),
    Cli("eval of a missing dataset", ("eval", "--data", "{tmp}/none.jsonl", "--out", "{tmp}/out"),
        "none.jsonl"),
    Cli("eval with a price of 1e308", ("eval", "--data", "{tmp}/none.jsonl", "--out", "{tmp}/o",
                                       "--price", "small=1e308,1"), "--price small needs"),
    Cli("eval with a price of inf", ("eval", "--report-only", "--out", "{tmp}/o",
                                     "--price", "large=1,inf"), "from 0 to 1,000,000"),
    Cli("eval with a price over the bound", ("eval", "--report-only", "--out", "{tmp}/o",
                                             "--price", "large=5e6,1"), "--price large needs"),
    Cli("doctor on the fake backend", ("doctor", "--backend", "fake"), "fake backend.*run"),
    Cli("doctor --gpu-memory without vLLM engines",
        ("doctor", "--backend", "transformers", "--gpu-memory", "24GiB"),
        "--gpu-memory sizes the memory plan of in-process vLLM"),
    Cli("plan --gpus without --gpu-memory", ("plan", "--gpus", "4"), "--gpus plans .*--gpu-memory"),
    Cli("a run with look-alike options", ("run", "q?", "--option", "red", "--option", "ｒｅｄ"),
        "look-alike"),
    Cli("--options with a 5,000-digit integer", ("run", "q?", "--options", f"[{_DIGITS}]"),
        "--options .*an integer of 5,000 digits, over the limit of 100"),
    Cli("--options nested 50,000 deep", ("run", "q?", "--options", _DEEP),
        "--options .*nests too deep"),
    Cli("--set seed of 5,000 digits", ("run", "q?", "--set", f"seed={_DIGITS}"),
        "--set seed .*an integer of 5,000 digits"),
    Cli("--set nested 50,000 deep", ("run", "q?", "--set", f"keep_ratio={_DEEP}"),
        "--set keep_ratio .*nests too deep"),
    Cli("--engine max_model_len of 5,000 digits", ("run", "q?", "--backend", "vllm", "--small",
                                                   "s", "--large", "l", "--engine",
                                                   f"max_model_len={_DIGITS}"),
        "--engine max_model_len .*5,000 digits"),
    Cli("--small-engine nested 50,000 deep", ("run", "q?", "--backend", "vllm", "--small", "s",
                                              "--large", "l", "--small-engine",
                                              f"mm_processor_kwargs={_DEEP}"),
        "--small-engine mm_processor_kwargs .*nests too deep"),
    Cli("--engine kv_cache_gib=Infinity", (*_PLANNED, "--gpu-memory", "80GB", "--engine",
                                           "kv_cache_gib=Infinity"),
        "kv_cache_gib .*Infinity, which is not a number JSON has"),
    Cli("--engine kv_cache_gib=1e300", (*_PLANNED, "--gpu-memory", "80GB", "--engine",
                                        "kv_cache_gib=1e300"),
        "kv_cache_gib must be a number of GiB > 0 and <= 1,048,576, got 1e\\+300"),
    Cli("--gpu-memory of 400 digits", (*_PLANNED, "--gpu-memory", "9" * 400 + "GB"),
        "--gpu-memory must be a size such as 80GiB"),
    Cli("--gpu-memory of 1e400 GiB", (*_PLANNED, "--gpu-memory", "1" + "0" * 400),
        "--gpu-memory must be a size such as 80GiB"),
)  # fmt: skip
