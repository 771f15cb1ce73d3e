"""Backends chosen by name: for the CLI, LangGraph Studio, the endpoint, examples and scripts.

Each model picks its own kind, so deployments can be mixed: the small model in-process and the
large one on a remote ``vllm serve`` (or a ``vllm-router`` in front of several replicas), or
both remote. A model whose URL is given is remote (``openai``) unless its kind says otherwise.

Nothing here starts an engine: vLLM engines start on the first request, transformers models
load on the first request. API keys come from the environment, never from flags (which other
users of the machine can read), and no backend shows its key in a message, log or ``repr``.
The command line's model flags (:mod:`mai_graph.cli.backends`) translate into these functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from mai_graph.backends.base import Side, VLMBackend
from mai_graph.deploy.build import build_lineup as build_lineup  # the one way to build
from mai_graph.deploy.spec import DEFAULT_RETRIES as DEFAULT_RETRIES  # re-exported
from mai_graph.deploy.spec import DEFAULT_URLS as SPEC_URLS
from mai_graph.deploy.spec import LineupSpec
from mai_graph.errors import ConfigError

if TYPE_CHECKING:
    from mai_graph.backends.vllm import VLLMBackend

__all__ = [
    "BACKENDS",
    "ROLES",
    "api_keys_from_env",
    "backend_for",
    "backends_for",
    "backends_from_env",
    "build_lineup",
    "lineup_for",
    "lineup_from_env",
    "lineup_spec",
]

BACKENDS = ("fake", "vllm", "transformers", "openai")
"""``fake``: canned offline answers (no model); ``vllm``: in-process vLLM engines;
``transformers``: Hugging Face models in-process; ``openai``: OpenAI-compatible servers
(``vllm serve``, ``vllm-router``), the models being served model names."""

ROLES = ("small", "large")

DEFAULT_URLS = (SPEC_URLS["small"], SPEC_URLS["large"])
"""Where ``openai`` backends look when no URL is given (small, large)."""


def _check_kind(kind: str, parameter: str) -> None:
    if kind not in BACKENDS:
        raise ConfigError(
            f"backend must be one of {list(BACKENDS)}, got {kind!r}",
            parameter=parameter,
            value=kind,
            fix="use fake (offline), vllm, transformers or openai",
        )


def backend_for(
    kind: str,
    model: str,
    *,
    role: str = "small",
    url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
    retries: int | None = None,
    engine: Mapping[str, Any] | None = None,
    plan: bool = True,
) -> VLMBackend:
    """One model's backend (a one-line :class:`~mai_graph.deploy.spec.ModelSpec`).

    An in-process vLLM model is planned as the only engine of its card (on a GPU: its share
    and context); a second engine then cannot start beside it. Build engines that share a
    card together (:func:`backends_for`, :func:`lineup_for`, :func:`build_lineup`).

    Args:
        kind: ``vllm``, ``transformers`` or ``openai`` (``fake`` pairs come from
            :func:`backends_for`).
        model: Checkpoint path or hub id; for ``openai`` the served model name.
        role: ``small`` or ``large`` (the default URL of ``openai``).
        url: ``openai``: the server's base URL, e.g. ``http://10.0.0.5:8000/v1`` (a
            ``vllm-router`` in front of replicas works the same).
        api_key: ``openai``: the server's API key (default: none).
        timeout_s: ``openai``: longest a request may take (default: the backend's).
        retries: ``openai``: retries of a request that failed before its stream started
            (default :data:`DEFAULT_RETRIES`).
        engine: Engine options (checked for the kind; see ``ModelSpec.engine``).
        plan: Run the memory plan (``False``: start the engine exactly as declared).

    Example:
        >>> backend_for("vllm", "Qwen/Qwen3-VL-2B-Instruct").name
        'Qwen/Qwen3-VL-2B-Instruct'
    """
    from mai_graph.deploy.spec import ModelSpec

    _check_kind(kind, "backend")
    if kind == "fake":
        raise ConfigError(
            "fake backends come in pairs",
            parameter="backend",
            value=kind,
            fix="use backends_for('fake', None, None)",
        )
    spec = ModelSpec(model=model, backend=kind, url=url, engine=dict(engine or {}))  # type: ignore[arg-type]
    alone = False
    if kind == "vllm" and plan:
        from mai_graph.deploy.plan import plan_for_start
        from mai_graph.deploy.spec import LineupSpec

        given = "gpu_memory_utilization" in spec.engine
        planned = plan_for_start(LineupSpec(backend="vllm", small=spec.checked("vllm", role)))
        assert planned.small is not None
        spec = planned.small
        alone = not given and "gpu_memory_utilization" in spec.engine
    backend = spec.build(role=role, api_key=api_key, timeout_s=timeout_s, retries=retries)
    if alone:  # planned for the whole card: no second engine may start beside it on a GPU
        cast("VLLMBackend", backend).handle._unplanned_share = True
    return backend


def lineup_spec(
    kind: str | None,
    small: str | None,
    large: str | None,
    *,
    drafters: Sequence[str] = (),
    larger: Sequence[str] = (),
    urls: tuple[str | None, str | None] = (None, None),
    kinds: tuple[str | None, str | None] = (None, None),
    engines: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] = (None, None),
    added_engines: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] = (None, None),
    common_engine: Mapping[str, Any] | None = None,
    timeout_s: float | None = None,
    retries: int | None = None,
    base: Any = None,
    names: tuple[str, str] = ("--drafter", "--larger"),
    where: str = "--small/--large",
) -> LineupSpec:
    """The :class:`~mai_graph.deploy.spec.LineupSpec` that flags or variables declare.

    ``base`` (a lineup file's spec) is the starting point, and every argument given here
    overrides it: ``kind`` (``None``: the file's), a model named here replaces the file's model
    of that role but keeps its options, and engine options merge over the file's
    (``common_engine`` for every model, then the role's own). Each model's kind is its entry in
    ``kinds``, else its own in the file, else ``openai`` when it has a URL, else the lineup's.
    Drafters and chain stages added here take the small (large) model's kind and server, and
    ``added_engines``' options (after ``common_engine``).

    Raises:
        ConfigError: Unknown kinds, a model missing for a real backend, added models on the
            fake pair, unknown engine options.
    """
    from mai_graph.deploy.spec import (
        LineupSpec,
        ModelSpec,
        check_retries,
        fake_extras_error,
        missing_model_error,
    )

    for role, own in zip(ROLES, kinds):
        if own is not None:
            _check_kind(own, f"{role}_backend")
    lineup = base if base is not None else LineupSpec()
    kind = kind or lineup.backend
    _check_kind(kind, "backend")
    lineup = lineup.model_copy(update={"backend": kind})
    common = dict(common_engine or {})
    chosen: list[str] = []
    specs: list[Any] = []
    for i, role in enumerate(ROLES):
        current = getattr(lineup, role)
        model = (small, large)[i] or (current.model if current is not None else None)
        url = urls[i] or (current.url if current is not None else None)
        own = kinds[i] or (current.backend if current is not None else None)
        chosen.append(own or ("openai" if url else kind))
        if chosen[i] == "fake" or model is None:
            specs.append(None)
            continue
        fields: dict[str, Any] = {} if current is None else current.model_dump()
        fields.update(model=model, url=url, backend=chosen[i])
        fields["engine"] = {**fields.get("engine", {}), **common, **dict(engines[i] or {})}
        specs.append(ModelSpec.model_validate(fields))
    missing = [r for r, k, m in zip(ROLES, chosen, specs) if k != "fake" and m is None]
    if missing:
        raise missing_model_error(chosen, missing, where)
    lineup = lineup.model_copy(update=dict(zip(ROLES, specs)))
    for i, (key, models) in enumerate((("drafters", drafters), ("larger", larger))):
        if not models:
            continue
        anchor = specs[i]
        if anchor is None:
            raise fake_extras_error(names[i], list(models))
        options = {**common, **dict(added_engines[i] or {})}
        added = [
            ModelSpec(model=m, backend=anchor.backend, url=anchor.url,
                      api_key_env=anchor.api_key_env, engine=dict(options))
            for m in models
        ]  # fmt: skip
        lineup = lineup.model_copy(update={key: [*getattr(lineup, key), *added]})
    update: dict[str, Any] = {}
    if timeout_s is not None:
        update["request_timeout_s"] = timeout_s
    if check_retries(retries) is not None:
        update["request_retries"] = retries
    return lineup.model_copy(update=update) if update else lineup


def backends_for(
    kind: str,
    small: str | None,
    large: str | None,
    *,
    where: str = "--small/--large",
    urls: tuple[str | None, str | None] = (None, None),
    kinds: tuple[str | None, str | None] = (None, None),
    api_keys: tuple[str | None, str | None] = (None, None),
    timeout_s: float | None = None,
    retries: int | None = None,
    engines: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] = (None, None),
    plan: bool = True,
) -> tuple[VLMBackend, VLMBackend]:
    """The (small, large) backends; ``where`` names the model settings in error messages.

    In-process vLLM engines are planned together (:func:`build_lineup`): on a GPU each gets
    its share, KV pool and context, and they start in order before the first request.

    Each model's kind is its entry in ``kinds``, else ``openai`` when its URL is given, else
    ``kind``. So ``backends_for("vllm", small, large, urls=(None, url))`` runs the small model
    in-process and sends the large model's requests to ``url``.

    Args:
        kind: The kind of both models unless ``kinds`` or ``urls`` say otherwise.
        small: The small model (path, hub id or served name); unused for ``fake``.
        large: The large model.
        where: How the caller names the two model settings (``--small/--large``).
        urls: ``openai`` base URLs (default ports 8000 and 8001 on loopback).
        kinds: A kind per model (``None``: see above).
        api_keys: An API key per remote model.
        timeout_s: Longest a remote request may take.
        retries: Retries of a remote request that failed before its stream started.
        engines: Engine options per model.
        plan: Run the memory plan (``False``: start the engines exactly as declared).

    Example:
        >>> small, large = backends_for("vllm", "small-ckpt", "served-large",
        ...                             urls=(None, "http://10.0.0.5:8000/v1"))
        >>> type(small).__name__, type(large).__name__
        ('VLLMBackend', 'OpenAIBackend')
    """
    pair = lineup_for(
        kind, small, large, where=where, urls=urls, kinds=kinds, api_keys=api_keys,
        timeout_s=timeout_s, retries=retries, engines=engines, plan=plan,
    )  # fmt: skip
    return _single(pair[0]), _single(pair[1])


def _single(side: Side) -> VLMBackend:
    """A side built without drafters or a chain: one backend."""
    if isinstance(side, list):  # lineup_for makes a list only of added models
        raise AssertionError("a two-model lineup built a list")
    return side


def api_keys_from_env(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The remote servers' API keys: ``MAI_GRAPH_SMALL_API_KEY``, ``MAI_GRAPH_LARGE_API_KEY``.

    >>> api_keys_from_env({"MAI_GRAPH_LARGE_API_KEY": "k"})
    (None, 'k')
    """
    env = os.environ if env is None else env
    return env.get("MAI_GRAPH_SMALL_API_KEY") or None, env.get("MAI_GRAPH_LARGE_API_KEY") or None


def _number(env: Mapping[str, str], name: str, kind: type) -> Any:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    from mai_graph.jsonin import parse_number

    return parse_number(raw, parameter=name, integer=kind is int)


def _list(env: Mapping[str, str], name: str) -> list[str]:
    return [m.strip() for m in env.get(name, "").split(",") if m.strip()]


def _env_engine(env: Mapping[str, str], name: str) -> dict[str, Any]:
    from mai_graph.deploy.spec import engine_options_from_json

    return engine_options_from_json(env.get(name), name)


def lineup_from_env(env: Mapping[str, str] | None = None) -> LineupSpec:
    """The :class:`~mai_graph.deploy.spec.LineupSpec` the environment declares.

    See :func:`backends_from_env` for the variables.
    """
    from mai_graph.deploy.spec import load_lineup

    env = os.environ if env is None else env
    path = env.get("MAI_GRAPH_LINEUP") or None
    base = None
    if path is not None:
        try:
            base = load_lineup(path, flag="MAI_GRAPH_LINEUP")
        except ConfigError as exc:
            message = exc.message
            if not message.startswith("MAI_GRAPH_LINEUP"):
                message = f"MAI_GRAPH_LINEUP: {message}"
            raise ConfigError(message, parameter="MAI_GRAPH_LINEUP", value=path,
                              fix=exc.fix) from None  # fmt: skip
    return lineup_spec(
        env.get("MAI_GRAPH_BACKEND") or (None if base is not None else "fake"),
        env.get("MAI_GRAPH_SMALL") or None,
        env.get("MAI_GRAPH_LARGE") or None,
        drafters=_list(env, "MAI_GRAPH_DRAFTERS"),
        larger=_list(env, "MAI_GRAPH_LARGER"),
        names=("MAI_GRAPH_DRAFTERS", "MAI_GRAPH_LARGER"),
        where="MAI_GRAPH_SMALL/MAI_GRAPH_LARGE",
        urls=(env.get("MAI_GRAPH_SMALL_URL") or None, env.get("MAI_GRAPH_LARGE_URL") or None),
        kinds=(
            env.get("MAI_GRAPH_SMALL_BACKEND") or None,
            env.get("MAI_GRAPH_LARGE_BACKEND") or None,
        ),
        common_engine=_env_engine(env, "MAI_GRAPH_ENGINE"),
        engines=(
            _env_engine(env, "MAI_GRAPH_SMALL_ENGINE"),
            _env_engine(env, "MAI_GRAPH_LARGE_ENGINE"),
        ),
        added_engines=(
            _env_engine(env, "MAI_GRAPH_DRAFTER_ENGINE"),
            _env_engine(env, "MAI_GRAPH_LARGER_ENGINE"),
        ),
        timeout_s=_number(env, "MAI_GRAPH_REQUEST_TIMEOUT", float),
        retries=_number(env, "MAI_GRAPH_REQUEST_RETRIES", int),
        base=base,
    )


def backends_from_env(
    env: Mapping[str, str] | None = None, *, context: Any = None
) -> tuple[Side, Side]:
    """Backends named by environment variables (Studio, ``langgraph dev``, examples).

    - ``MAI_GRAPH_LINEUP``: a lineup file (TOML or JSON, see :mod:`mai_graph.deploy.spec`);
      the variables below override it.
    - ``MAI_GRAPH_BACKEND``: the kind of both models (default ``fake``, or the file's);
      ``MAI_GRAPH_SMALL_BACKEND`` / ``MAI_GRAPH_LARGE_BACKEND`` override it per model.
    - ``MAI_GRAPH_SMALL`` / ``MAI_GRAPH_LARGE``: the models (paths, hub ids, served names).
    - ``MAI_GRAPH_SMALL_URL`` / ``MAI_GRAPH_LARGE_URL``: a model's server; makes it remote.
    - ``MAI_GRAPH_SMALL_API_KEY`` / ``MAI_GRAPH_LARGE_API_KEY``: the servers' keys.
    - ``MAI_GRAPH_ENGINE``, ``MAI_GRAPH_SMALL_ENGINE``, ``MAI_GRAPH_LARGE_ENGINE``,
      ``MAI_GRAPH_DRAFTER_ENGINE``, ``MAI_GRAPH_LARGER_ENGINE``: engine options as JSON
      objects (every model, the small, the large, each added drafter, each chain stage), e.g.
      ``{"max_model_len": 16384, "kv_cache_dtype": "fp8"}``.
    - ``MAI_GRAPH_GPU_MEMORY``: plan as if the card had this much free (e.g. ``40GiB``);
      ``MAI_GRAPH_PLAN=off``: no memory plan (shares as given).
    - ``MAI_GRAPH_REQUEST_TIMEOUT`` (seconds) / ``MAI_GRAPH_REQUEST_RETRIES``: remote requests.
    - ``MAI_GRAPH_DRAFTERS``: more drafter models beside the small one, comma-separated (same
      kind and server); ``MAI_GRAPH_LARGER``: a chain's further models after the large one,
      smallest first.

    Example:
        >>> small, large = backends_from_env({
        ...     "MAI_GRAPH_SMALL_BACKEND": "vllm", "MAI_GRAPH_SMALL": "small-ckpt",
        ...     "MAI_GRAPH_LARGE_URL": "http://10.0.0.5:8000/v1", "MAI_GRAPH_LARGE": "large"})
        >>> type(small).__name__, type(large).__name__
        ('VLLMBackend', 'OpenAIBackend')
    """
    env = os.environ if env is None else env
    where = "MAI_GRAPH_SMALL/MAI_GRAPH_LARGE"
    try:
        plan = (env.get("MAI_GRAPH_PLAN") or "auto").strip().lower()
        if plan not in ("auto", "off"):
            raise ConfigError(
                f"MAI_GRAPH_PLAN must be auto or off, got {plan!r}",
                parameter="MAI_GRAPH_PLAN",
                value=plan,
                fix="unset it (auto) or set MAI_GRAPH_PLAN=off",
            )
        return build_lineup(
            lineup_from_env(env),
            where=where,
            api_keys=api_keys_from_env(env),
            context=context,
            plan=plan == "auto",
            gpu_memory=env.get("MAI_GRAPH_GPU_MEMORY") or None,
        )
    except ConfigError as exc:  # named by its variable (MAI_GRAPH_BACKEND unless it says)
        message = exc.message
        if not message.startswith("MAI_GRAPH_"):
            message = f"MAI_GRAPH_BACKEND: {message}"
        raise ConfigError(message, parameter=exc.parameter, value=exc.value,
                          fix=exc.fix) from None  # fmt: skip


def lineup_for(
    kind: str,
    small: str | None,
    large: str | None,
    *,
    drafters: Sequence[str] = (),
    larger: Sequence[str] = (),
    names: tuple[str, str] = ("--drafter", "--larger"),
    where: str = "--small/--large",
    api_keys: tuple[str | None, str | None] = (None, None),
    plan: bool = True,
    context: Any = None,
    **settings: Any,
) -> tuple[Side, Side]:
    """:func:`backends_for`, plus more drafters beside ``small`` and a chain after ``large``.

    Each added model has the kind, server, key and request settings of the model it joins.
    Without ``drafters`` and ``larger`` this is :func:`backends_for`; with them a side is a
    list (drafters, or the chain smallest first). ``names`` names the two settings in errors;
    ``settings`` are :func:`lineup_spec`'s (``urls``, ``kinds``, ``engines``, ``timeout_s``,
    ``retries``, ...). ``plan``: run the memory plan first (see :func:`build_lineup`;
    ``False``: start the engines exactly as declared).

    Raises:
        ConfigError: Added models with fake backends, or two models of the lineup with one
            name.
    """
    spec = lineup_spec(
        kind, small, large, drafters=drafters, larger=larger, names=names, where=where,
        **settings,
    )  # fmt: skip
    return build_lineup(spec, where=where, api_keys=api_keys, plan=plan, context=context)
