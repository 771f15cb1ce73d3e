"""One declaration of a model and its engine (:class:`ModelSpec`), and of a lineup of them.

Every door builds its backends from these: the Python API (``build_lineup(LineupSpec(...))``), the
CLI (``--small-engine KEY=VALUE``, ``--lineup FILE``), the environment (``MAI_GRAPH_LINEUP``,
``MAI_GRAPH_SMALL_ENGINE``) for Studio and the endpoint, ``eval`` and ``profile``; drafters and
chain stages are specs like the others. Engine options are checked when the spec is read,
before any engine starts: a typo is a :class:`~mai_graph.errors.ConfigError` naming the option
and the valid ones, a bad value names the option and what it takes (vLLM's own field types).

A lineup file (TOML or JSON) holds the whole deployment::

    backend = "vllm"              # the kind of every model that names none

    [small]
    model = "Qwen/Qwen3-VL-2B-Instruct"
    max_model_len = 16384
    mm_processor_kwargs = { max_pixels = 1048576 }

    [large]
    model = "Qwen/Qwen3-VL-8B-Instruct"
    kv_cache_dtype = "fp8"

    [[larger]]                    # optional: a chain's further stages, smallest first
    model = "Qwen/Qwen3-VL-32B-Instruct"
    backend = "openai"
    url = "http://10.0.0.7:8000/v1"

Keys of a model other than ``model``, ``name``, ``backend``, ``url`` and ``api_key_env`` are
its engine options (they may also be grouped under ``engine``).
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mai_graph.backends.base import Side, VLMBackend
from mai_graph.errors import ConfigError, check_int, check_number
from mai_graph.files import read_text
from mai_graph.jsonin import MAX_BYTES, check_limits, json_or_text, parse_json

__all__ = [
    "KINDS",
    "LINEUP_KINDS",
    "ROLES",
    "LineupSpec",
    "ModelSpec",
    "check_retries",
    "engine_options_from_items",
    "fake_extras_error",
    "engine_options_from_json",
    "load_lineup",
    "missing_model_error",
]

KINDS = ("vllm", "transformers", "openai")
"""Backend kinds a model can have."""

LINEUP_KINDS = ("fake", *KINDS)
"""Kinds a whole lineup can default to (``fake``: the canned offline pair)."""

ROLES = ("small", "large")

Kind = Literal["vllm", "transformers", "openai"]
LineupKind = Literal["fake", "vllm", "transformers", "openai"]

DEFAULT_URLS = {"small": "http://127.0.0.1:8000/v1", "large": "http://127.0.0.1:8001/v1"}
"""Where ``openai`` models look when no URL is given."""

DEFAULT_RETRIES = 2
"""Retries of a remote request that failed before its stream started (connection errors,
timeouts, 408 / 409 / 429 and 5xx answers), with exponential back-off."""

_SPEC_KEYS = frozenset({"model", "name", "backend", "url", "api_key_env", "engine"})

VLLM_OWN_OPTIONS: Mapping[str, str] = {
    "kv_cache_gib": "KV cache size in GiB per engine (vLLM's kv_cache_memory_bytes, CPU and GPU)",
    "max_restarts": "how often a dead engine is started again (int >= 0)",
}
"""Options of mai-graph's vLLM backend beside vLLM's own ``AsyncEngineArgs`` fields."""

VLLM_COMMON = (
    "gpu_memory_utilization", "max_model_len", "dtype", "quantization", "tensor_parallel_size",
    "kv_cache_dtype", "max_num_seqs", "enforce_eager", "limit_mm_per_prompt",
    "mm_processor_kwargs", "device_ids", "kv_cache_gib",
)  # fmt: skip
"""The options most lineups set (named in error messages)."""

TRANSFORMERS_OPTIONS: Mapping[str, str] = {
    "dtype": "float32 (default), bfloat16 or float16",
    "threads": "torch threads for this model",
    "cache_entries": "prompt KV caches kept for reuse (default 8)",
    "max_model_len": "longest prompt plus answer, tokens (default: the model's, at most 32768)",
    "attn_implementation": "sdpa or eager (attention scores need eager)",
    "revision": "the checkpoint's revision on the hub",
    "trust_remote_code": "run the checkpoint's own model code",
}
"""Options of the transformers backend (``from_pretrained`` arguments and its own)."""

OPENAI_OPTIONS: Mapping[str, str] = {
    "timeout_s": "longest a request may take, seconds",
    "retries": "resend a request that failed before its answer started, up to N times",
    "connect_timeout_s": "give up connecting after this many seconds",
}
"""Options of a remote model (its engine's options are set where the server runs)."""


def check_retries(retries: Any) -> int | None:
    """``retries`` if it is ``None`` or an int >= 0; else a ``ConfigError`` naming it."""
    if retries is None:
        return None
    return check_int(
        retries,
        "retries",
        minimum=0,
        fix="give how often a failed request may be sent again, e.g. 2",
    )


def missing_model_error(chosen: Sequence[str], missing: Sequence[str], where: str) -> ConfigError:
    """The refusal of a lineup whose real backends lack a model (``where`` names the flags)."""
    labels = where.split("/")
    if chosen[0] == chosen[1]:
        message = f"backend {chosen[0]} needs both models ({where})"
    else:
        message = "; ".join(
            f"the {r} model's backend {chosen[ROLES.index(r)]} needs a model "
            f"({labels[ROLES.index(r)] if len(labels) == 2 else where})"
            for r in missing
        )
    return ConfigError(
        message,
        parameter=where,
        fix="give checkpoint paths or hub ids of one model family, or the served model "
        "names for remote servers (`mai-graph build-tiny DIR` builds a local test pair)",
    )


def fake_extras_error(flag: str, models: list[str]) -> ConfigError:
    """The refusal of drafters or chain stages added to the canned fake pair."""
    return ConfigError(
        f"{flag} needs real models; the fake backend is one canned pair",
        parameter=flag,
        value=models,
        fix=f"choose a vllm, transformers or openai backend (or drop {flag})",
    )


def _normalize_key(key: str) -> str:
    return key.strip().replace("-", "_")


def _unknown(key: str, valid: Sequence[str], where: str, common: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return ConfigError(
        f"{where}: unknown engine option {key!r}",
        parameter=key,
        value=key,
        fix=f"{hint}valid options include {', '.join(common)} "
        f"({len(valid)} in all{'; see vLLM AsyncEngineArgs' if len(valid) > 20 else ''})",
    )


def _check_vllm_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    if "model" in options:
        raise ConfigError(
            f"{where}: the model is the spec's model, not an engine option",
            parameter="model",
            fix="set `model = ...` beside the engine options",
        )
    own = {key: _check_own(key, value, where) for key, value in options.items()
           if key in VLLM_OWN_OPTIONS}  # fmt: skip
    if len(own) == len(options):  # nothing for vLLM to check (and no need to import it)
        return own
    try:
        from mai_graph.backends.vllm import compat

        names = compat.engine_arg_names()
    except ImportError:  # no vLLM here: its own checks run where the engine starts
        names = None
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key in own:
            out[key] = own[key]
            continue
        if names is not None and key not in names:
            raise _unknown(key, sorted(names | set(VLLM_OWN_OPTIONS)), where, VLLM_COMMON)
        out[key] = _check_vllm_value(key, value, where) if names is not None else value
    return out


def _check_own(key: str, value: Any, where: str) -> Any:
    if key == "kv_cache_gib":
        return check_number(value, key, unit="GiB", above=0, maximum=MAX_BYTES >> 30,
                            where=where, fix="e.g. kv_cache_gib=2")  # fmt: skip
    return check_int(
        value,
        key,
        minimum=0,
        where=where,
        fix="0 fails fast after an engine dies; 2 is the default",
    )


def _check_vllm_value(key: str, value: Any, where: str) -> Any:
    from mai_graph.backends.vllm import compat

    if key == "gpu_memory_utilization" and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1
    ):
        raise ConfigError(
            f"{where}: gpu_memory_utilization must be in (0, 1], got {value!r}",
            parameter=key,
            value=value,
            fix="the share of the card this engine may take, e.g. 0.25 (or leave it to the plan)",
        )
    if key == "quantization" and value is not None:
        methods = compat.quantization_methods()
        if value not in methods:
            raise ConfigError(
                f"{where}: unknown quantization method {value!r}",
                parameter=key,
                value=value,
                fix=f"use one of {', '.join(sorted(methods)[:12])}, ... (vLLM's list)",
            )
    adapter = compat.engine_arg_type(key)
    if adapter is None:
        return value
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        problem = exc.errors()[0].get("msg", str(exc)) if exc.errors() else str(exc)
        raise ConfigError(
            f"{where}: engine option {key}={value!r} is invalid: {problem}",
            parameter=key,
            value=value,
            fix=f"give {key} a value of the type vLLM declares for it",
        ) from None


def _check_closed(options: dict[str, Any], valid: Mapping[str, str], where: str) -> dict[str, Any]:
    for key in options:
        if key not in valid:
            raise _unknown(key, sorted(valid), where, sorted(valid))
    return dict(options)


class ModelSpec(BaseModel):
    """One model of a lineup and the engine it runs on.

    Example:
        >>> spec = ModelSpec(model="Qwen/Qwen3-VL-8B-Instruct", max_model_len=16384,
        ...                  kv_cache_dtype="fp8")
        >>> spec.engine
        {'max_model_len': 16384, 'kv_cache_dtype': 'fp8'}
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, max_length=4096)
    """Checkpoint folder or hub id; for ``openai`` models the served model name."""
    name: str | None = Field(default=None, min_length=1, max_length=256)
    """Name in metrics, records and served responses (default: ``model``)."""
    backend: Kind | None = None
    """``vllm``, ``transformers`` or ``openai`` (default: the lineup's kind, or ``openai``
    when ``url`` is set)."""
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    """A remote model's server (``vllm serve`` / ``vllm-router`` base URL)."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable holding the remote server's API key (never the key itself)."""
    engine: dict[str, Any] = Field(default_factory=dict)
    """Engine options: vLLM's ``AsyncEngineArgs`` fields (``gpu_memory_utilization``,
    ``max_model_len``, ``dtype``, ``quantization``, ``tensor_parallel_size``,
    ``kv_cache_dtype``, ``max_num_seqs``, ``enforce_eager``, ``limit_mm_per_prompt``,
    ``mm_processor_kwargs``, ``device_ids``, ...) plus ``kv_cache_gib`` and ``max_restarts``;
    for transformers and remote models their own short lists."""

    @model_validator(mode="before")
    @classmethod
    def _lift_engine_options(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        engine = data.get("engine") or {}
        if not isinstance(engine, Mapping):
            raise ValueError(f"engine must be a table of options, got {engine!r}")
        engine = {_normalize_key(str(k)): v for k, v in engine.items()}
        for key in [k for k in data if k not in _SPEC_KEYS]:
            engine[_normalize_key(str(key))] = data.pop(key)
        data["engine"] = engine
        return data

    @field_validator("engine")
    @classmethod
    def _plain_keys(cls, engine: dict[str, Any]) -> dict[str, Any]:
        for key in engine:
            if not key.isidentifier():
                raise ValueError(f"engine option names are identifiers, got {key!r}")
        return engine

    def kind(self, default: str = "vllm") -> str:
        """This model's backend kind: its own, else ``openai`` with a URL, else ``default``."""
        return self.backend or ("openai" if self.url else default)

    def checked(self, default_kind: str = "vllm", where: str = "model") -> ModelSpec:
        """This spec with its engine options checked for its kind (raises ``ConfigError``)."""
        kind = self.kind(default_kind)
        label = f"{where} ({self.model})"
        if kind == "vllm":
            engine = _check_vllm_options(self.engine, label)
        elif kind == "transformers":
            engine = _check_closed(self.engine, TRANSFORMERS_OPTIONS, label)
        elif kind == "openai":
            engine = _check_closed(self.engine, OPENAI_OPTIONS, label)
        else:
            raise ConfigError(
                f"{where}: a model needs a real backend, got {kind!r}",
                parameter="backend",
                value=kind,
                fix=f"use one of {list(KINDS)}",
            )
        return self.model_copy(update={"engine": engine})

    def with_engine(self, **options: Any) -> ModelSpec:
        """A copy with ``options`` merged over the engine options (not yet checked)."""
        merged = {**self.engine, **{_normalize_key(k): v for k, v in options.items()}}
        return self.model_copy(update={"engine": merged})

    def build(
        self,
        *,
        default_kind: str = "vllm",
        role: str = "small",
        api_key: str | None = None,
        timeout_s: float | None = None,
        retries: int | None = None,
        where: str | None = None,
        checked: bool = False,
    ) -> VLMBackend:
        """The backend this spec declares (nothing starts: engines start on first use).

        Args:
            default_kind: The kind when the spec names none (and has no URL).
            role: ``small`` or ``large``: the default server of an ``openai`` model.
            api_key: A remote model's key (default: the ``api_key_env`` variable's value).
            timeout_s: A remote model's request timeout (its ``timeout_s`` option wins).
            retries: A remote model's retries (its ``retries`` option wins).
            where: How errors name this model (default: ``role``).
            checked: The options were already checked (by :meth:`LineupSpec.checked`).
        """
        spec = self if checked else self.checked(default_kind, where or role)
        kind = spec.kind(default_kind)
        options = dict(spec.engine)
        if kind == "vllm":
            from mai_graph.backends.vllm import VLLMBackend

            return VLLMBackend(spec.model, name=spec.name, **options)
        if kind == "transformers":
            from mai_graph.backends.transformers import TransformersBackend

            return TransformersBackend(spec.model, name=spec.name, **options)
        from mai_graph.backends.openai import OpenAIBackend

        if spec.api_key_env and api_key is None:
            api_key = os.environ.get(spec.api_key_env) or None
        retries = check_retries(options.pop("retries", retries))
        timeout = options.pop("timeout_s", timeout_s)
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout_s"] = timeout
        if "connect_timeout_s" in options:
            extra["connect_timeout_s"] = options.pop("connect_timeout_s")
        if spec.name:
            extra["name"] = spec.name
        return OpenAIBackend.from_url(
            spec.url or DEFAULT_URLS.get(role, DEFAULT_URLS["small"]),
            spec.model,
            api_key=api_key or "EMPTY",
            max_retries=DEFAULT_RETRIES if retries is None else retries,
            **extra,
        )


class LineupSpec(BaseModel):
    """The models of a deployment: small, large, more drafters, a chain; and their kind.

    ``build()`` returns what :func:`~mai_graph.graph.create_mai_graph` and
    :func:`~mai_graph.api.arun` take: ``(small, large)``, a side being a list when it has
    several models (drafters, or the chain smallest first).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: LineupKind = "fake"
    """The kind of every model that names none (``fake``: the canned offline pair)."""
    small: ModelSpec | None = None
    large: ModelSpec | None = None
    drafters: list[ModelSpec] = Field(default_factory=list, max_length=16)
    """More drafters beside ``small`` (each answers short, see ``draft_quorum``)."""
    larger: list[ModelSpec] = Field(default_factory=list, max_length=8)
    """A chain's further models after ``large``, smallest first."""
    request_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Remote models: longest a request may take."""
    request_retries: int | None = Field(default=None, ge=0, le=20)
    """Remote models: retries of a request that failed before its stream started."""

    def members(self) -> Iterator[tuple[str, str, ModelSpec]]:
        """``(label, side, spec)`` of every declared model, drafters and chain included."""
        if self.small is not None:
            yield "small", "small", self.small
        for i, spec in enumerate(self.drafters, 2):
            yield f"drafter {i}", "small", spec
        if self.large is not None:
            yield "large", "large", self.large
        for i, spec in enumerate(self.larger, 1):
            yield f"larger {i}", "large", spec

    def kinds(self) -> list[tuple[str, str]]:
        """``(label, kind)`` of every model (``fake`` for an undeclared small / large)."""
        out = []
        for label, _, spec in self.members():
            out.append((label, spec.kind(self.backend)))
        return out

    def replace(self, label: str, spec: ModelSpec) -> LineupSpec:
        """A copy with the model called ``label`` (see :meth:`members`) replaced by ``spec``."""
        if label in ROLES:
            return self.model_copy(update={label: spec})
        side, _, number = label.partition(" ")
        key = "drafters" if side == "drafter" else "larger"
        items = list(getattr(self, key))
        items[int(number) - (2 if side == "drafter" else 1)] = spec
        return self.model_copy(update={key: items})

    def checked(self, where: str = "--small/--large") -> LineupSpec:
        """The lineup with every model's options checked; refuses what cannot be built."""
        chosen = [
            (self.small.kind(self.backend) if self.small else self.backend),
            (self.large.kind(self.backend) if self.large else self.backend),
        ]
        missing = [
            r
            for r, k, m in zip(ROLES, chosen, (self.small, self.large))
            if k != "fake" and m is None
        ]
        if missing:
            raise missing_model_error(chosen, missing, where)
        for side, extra in (("small", self.drafters), ("large", self.larger)):
            if extra and chosen[ROLES.index(side)] == "fake":
                flag = "--drafter" if side == "small" else "--larger"
                raise fake_extras_error(flag, [s.model for s in extra])
        names = [spec.name or spec.model for _, _, spec in self.members()]
        # One model may play small and large (a plumbing check); drafters and chain stages
        # must each be their own model.
        if (self.drafters or self.larger) and len(set(names)) != len(names):
            raise ConfigError(
                f"two models of this lineup share a name: {names}",
                parameter="--drafter/--larger",
                value=names,
                fix="give each drafter and chain stage its own model",
            )
        return self.with_checked_options()

    def with_checked_options(self, where: str = "") -> LineupSpec:
        """The lineup with every model's engine options checked for its kind."""
        out = self
        prefix = f"{where}: " if where else ""
        for label, _, spec in self.members():
            if spec.kind(self.backend) != "fake":
                out = out.replace(label, spec.checked(self.backend, prefix + label))
        return out

    def build(
        self,
        *,
        where: str = "--small/--large",
        api_keys: tuple[str | None, str | None] = (None, None),
        checked: bool = False,
    ) -> tuple[Side, Side]:
        """The backends exactly as declared (nothing starts; no memory plan).

        :func:`~mai_graph.deploy.build.build_lineup` plans the card first; the doors use it.

        Args:
            where: How errors name the small / large models.
            api_keys: The small / large remote servers' keys.
            checked: The lineup is already :meth:`checked` (its options are not checked again).

        Raises:
            ConfigError: Invalid lineups and options.
        """
        lineup = self if checked else self.checked(where)
        fakes: Any = None
        sides: dict[str, list[VLMBackend]] = {"small": [], "large": []}
        group: Any = None  # the in-process engines start together, in order, on a GPU
        for role, spec in (("small", lineup.small), ("large", lineup.large)):
            if spec is None:  # a fake side (checked above)
                if fakes is None:
                    from mai_graph.backends.fake import demo_backends

                    fakes = demo_backends()
                sides[role].append(fakes[ROLES.index(role)])
        for label, side, spec in lineup.members():
            built = spec.build(
                default_kind=lineup.backend,
                role=side,
                api_key=api_keys[ROLES.index(side)] if label in ROLES else None,
                timeout_s=lineup.request_timeout_s,
                retries=lineup.request_retries,
                where=label,
                checked=True,
            )
            if spec.kind(lineup.backend) == "vllm":
                if group is None:
                    from mai_graph.backends.vllm.startup import EngineGroup

                    group = EngineGroup()
                group.add(built)
            if label in ROLES:
                sides[side].insert(0, built)
            else:
                sides[side].append(built)
        return (
            sides["small"] if len(sides["small"]) > 1 else sides["small"][0],
            sides["large"] if len(sides["large"]) > 1 else sides["large"][0],
        )


def engine_options_from_items(items: Sequence[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` items (CLI flags) as options; values are JSON where they parse.

    >>> engine_options_from_items(["max_model_len=8192", "dtype=bfloat16",
    ...     'mm_processor_kwargs={"max_pixels": 1048576}'], "--small-engine")
    {'max_model_len': 8192, 'dtype': 'bfloat16', 'mm_processor_kwargs': {'max_pixels': 1048576}}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = _normalize_key(key)
        if not sep or not key.isidentifier():
            raise ConfigError(
                f"{flag} needs KEY=VALUE, got {item!r}",
                parameter=flag,
                value=item,
                fix=f"e.g. {flag} max_model_len=8192 (repeat the flag for more)",
            )
        out[key] = json_or_text(raw.strip(), parameter=f"{flag} {key}")
    return out


def engine_options_from_json(raw: str | None, name: str) -> dict[str, Any]:
    """An environment variable's engine options: a JSON object (empty / unset: none).

    >>> engine_options_from_json('{"max_model_len": 8192}', "MAI_GRAPH_SMALL_ENGINE")
    {'max_model_len': 8192}
    """
    if raw is None or not raw.strip():
        return {}
    example = f"""e.g. {name}='{{"max_model_len": 8192, "dtype": "bfloat16"}}'"""
    try:
        value = parse_json(raw, parameter=name, what="it", fix=example)
    except ConfigError as exc:
        value, problem = None, exc.message
    else:
        problem = "not an object"
    if not isinstance(value, dict):
        raise ConfigError(
            f"{name} must be a JSON object of engine options ({problem}), got {raw[:200]!r}",
            parameter=name,
            value=raw[:200],
            fix=example,
        )
    return {_normalize_key(str(k)): v for k, v in value.items()}


def load_lineup(path: str | Path, *, flag: str = "--lineup") -> LineupSpec:
    """Read a lineup file: TOML (``.toml``) or JSON; see the module docstring for its shape.

    Args:
        path: The file (read through :func:`~mai_graph.files.read_text`: a regular file of
            at most :data:`~mai_graph.files.MAX_READ_BYTES`).
        flag: How errors name where the path came from (``--lineup``, ``MAI_GRAPH_LINEUP``).

    Raises:
        ConfigError: The file cannot be read, does not parse, or declares something invalid
            (unknown keys, bad values, unknown engine options); the message names the file.
    """
    path = Path(path)
    what = f"the lineup file {str(path)!r}"
    fix = "TOML for .toml files, JSON otherwise (see docs/engines.md, lineup files)"
    text = read_text(path, flag=flag, what="lineup file")
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text, parse_float=_toml_float)
            check_limits(data, parameter="--lineup", what="it")
        else:
            data = parse_json(text, parameter="--lineup", what="it")
    except ConfigError as exc:
        problem = exc.message
    except RecursionError:
        problem = "it nests too deep to read"
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an int Python refuses
        problem = str(exc)[:300]
    else:
        return lineup_from_data(data, str(path))
    raise ConfigError(f"{what} does not parse: {problem}", parameter=flag, value=str(path),
                      fix=fix)  # fmt: skip


def _toml_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number (nan and inf are refused)")
    return value


def lineup_from_data(data: Any, where: str) -> LineupSpec:
    """A :class:`LineupSpec` from parsed data; errors name ``where`` and the bad field."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: a lineup is a table / object, got {type(data).__name__}",
            parameter="--lineup",
            value=where,
        )
    try:
        lineup = LineupSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(
            f"{where}: {loc or 'lineup'}: {first.get('msg')}",
            parameter=loc or "--lineup",
            value=where,
            fix="a lineup has backend, small, large, drafters, larger, request_timeout_s, "
            "request_retries; a model has model, name, backend, url, api_key_env and engine "
            "options",
        ) from None
    return lineup.with_checked_options(where)
