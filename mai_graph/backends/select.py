"""Backends chosen by name: for the CLI, LangGraph Studio, the endpoint, examples and scripts.

Each model picks its own kind, so deployments can be mixed: the small model in-process and the
large one on a remote ``vllm serve`` (or a ``vllm-router`` in front of several replicas), or
both remote. A model whose URL is given is remote (``openai``) unless its kind says otherwise.

Nothing here starts an engine: vLLM engines start on the first request, transformers models
load on the first request. API keys come from the environment, never from flags (which other
users of the machine can read), and no backend shows its key in a message, log or ``repr``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from mai_graph.errors import ConfigError

__all__ = [
    "BACKENDS",
    "ROLES",
    "add_backend_flags",
    "api_keys_from_env",
    "backend_for",
    "backends_for",
    "backends_from_args",
    "backends_from_env",
    "lineup_for",
]

BACKENDS = ("fake", "vllm", "transformers", "openai")
"""``fake``: canned offline answers (no model); ``vllm``: in-process vLLM engines;
``transformers``: Hugging Face models in-process; ``openai``: OpenAI-compatible servers
(``vllm serve``, ``vllm-router``), the models being served model names."""

ROLES = ("small", "large")

DEFAULT_URLS = ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1")
"""Where ``openai`` backends look when no URL is given (small, large)."""

DEFAULT_RETRIES = 2
"""Retries of a remote request that failed before its stream started (connection errors,
timeouts, 408 / 409 / 429 and 5xx answers), with exponential back-off."""


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
) -> Any:
    """One model's backend.

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

    Example:
        >>> backend_for("vllm", "Qwen/Qwen3-VL-2B-Instruct").name
        'Qwen/Qwen3-VL-2B-Instruct'
    """
    _check_kind(kind, "backend")
    if kind == "vllm":
        from mai_graph.backends.vllm import VLLMBackend

        return VLLMBackend(model)
    if kind == "transformers":
        from mai_graph.backends.transformers import TransformersBackend

        return TransformersBackend(model)
    if kind == "openai":
        from mai_graph.backends.openai import OpenAIBackend

        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or retries < 0
        ):
            raise ConfigError(
                f"retries must be an int >= 0, got {retries!r}",
                parameter="retries",
                value=retries,
                fix="give how often a failed request may be sent again, e.g. 2",
            )
        options: dict[str, Any] = {}
        if timeout_s is not None:
            options["timeout_s"] = timeout_s
        return OpenAIBackend.from_url(
            url or DEFAULT_URLS[ROLES.index(role)],
            model,
            api_key=api_key or "EMPTY",
            max_retries=DEFAULT_RETRIES if retries is None else retries,
            **options,
        )
    raise ConfigError(
        "fake backends come in pairs",
        parameter="backend",
        value=kind,
        fix="use backends_for('fake', None, None)",
    )


def _kind_of(kind: str, own: str | None, url: str | None) -> str:
    """A model's kind: its own, else ``openai`` when it has a URL, else the shared ``kind``."""
    return own or ("openai" if url else kind)


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
) -> tuple[Any, Any]:
    """The (small, large) backends; ``where`` names the model settings in error messages.

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

    Example:
        >>> small, large = backends_for("vllm", "small-ckpt", "served-large",
        ...                             urls=(None, "http://10.0.0.5:8000/v1"))
        >>> type(small).__name__, type(large).__name__
        ('VLLMBackend', 'OpenAIBackend')
    """
    _check_kind(kind, "backend")
    chosen: list[str] = []
    for role, own, url in zip(ROLES, kinds, urls):
        if own is not None:
            _check_kind(own, f"{role}_backend")
        chosen.append(_kind_of(kind, own, url))
    if chosen == ["fake", "fake"]:
        from mai_graph.backends.fake import demo_backends

        return demo_backends()
    models = (small, large)
    missing = [r for r, k, m in zip(ROLES, chosen, models) if k != "fake" and not m]
    if missing:
        names = where.split("/")
        if chosen[0] == chosen[1]:
            message = f"backend {chosen[0]} needs both models ({where})"
        else:
            message = "; ".join(
                f"the {r} model's backend {chosen[ROLES.index(r)]} needs a model "
                f"({names[ROLES.index(r)] if len(names) == 2 else where})"
                for r in missing
            )
        raise ConfigError(
            message,
            parameter=where,
            fix="give checkpoint paths or hub ids of one model family, or the served model "
            "names for remote servers (`mai-graph build-tiny DIR` builds a local test pair)",
        )
    fakes = None
    out: list[Any] = []
    for i, role in enumerate(ROLES):
        if chosen[i] == "fake":
            if fakes is None:
                from mai_graph.backends.fake import demo_backends

                fakes = demo_backends()
            out.append(fakes[i])
            continue
        out.append(
            backend_for(
                chosen[i],
                models[i] or "",
                role=role,
                url=urls[i],
                api_key=api_keys[i],
                timeout_s=timeout_s,
                retries=retries,
            )
        )
    return out[0], out[1]


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
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(
            f"{name} must be a number, got {raw!r}",
            parameter=name,
            value=raw,
            fix=f"set {name} to e.g. {'120' if kind is float else '2'}",
        ) from None


def _list(env: Mapping[str, str], name: str) -> list[str]:
    return [m.strip() for m in env.get(name, "").split(",") if m.strip()]


def backends_from_env(env: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """Backends named by environment variables (Studio, ``langgraph dev``, examples).

    - ``MAI_GRAPH_BACKEND``: the kind of both models (default ``fake``);
      ``MAI_GRAPH_SMALL_BACKEND`` / ``MAI_GRAPH_LARGE_BACKEND`` override it per model.
    - ``MAI_GRAPH_SMALL`` / ``MAI_GRAPH_LARGE``: the models (paths, hub ids, served names).
    - ``MAI_GRAPH_SMALL_URL`` / ``MAI_GRAPH_LARGE_URL``: a model's server; makes it remote.
    - ``MAI_GRAPH_SMALL_API_KEY`` / ``MAI_GRAPH_LARGE_API_KEY``: the servers' keys.
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
    kind = env.get("MAI_GRAPH_BACKEND", "fake")
    try:
        return lineup_for(
            kind,
            env.get("MAI_GRAPH_SMALL"),
            env.get("MAI_GRAPH_LARGE"),
            drafters=_list(env, "MAI_GRAPH_DRAFTERS"),
            larger=_list(env, "MAI_GRAPH_LARGER"),
            names=("MAI_GRAPH_DRAFTERS", "MAI_GRAPH_LARGER"),
            where="MAI_GRAPH_SMALL/MAI_GRAPH_LARGE",
            urls=(env.get("MAI_GRAPH_SMALL_URL") or None, env.get("MAI_GRAPH_LARGE_URL") or None),
            kinds=(
                env.get("MAI_GRAPH_SMALL_BACKEND") or None,
                env.get("MAI_GRAPH_LARGE_BACKEND") or None,
            ),
            api_keys=api_keys_from_env(env),
            timeout_s=_number(env, "MAI_GRAPH_REQUEST_TIMEOUT", float),
            retries=_number(env, "MAI_GRAPH_REQUEST_RETRIES", int),
        )
    except ConfigError as exc:
        raise ConfigError(
            f"MAI_GRAPH_BACKEND: {exc}", parameter=exc.parameter, value=exc.value
        ) from None


def add_backend_flags(
    parser: argparse.ArgumentParser,
    *,
    default: str = "fake",
    kinds: Sequence[str] = BACKENDS,
    kinds_help: str = "",
    shapes: bool = True,
) -> None:
    """The model flags every command shares: one kind for both models, or one per model.

    Args:
        parser: The command's parser.
        default: The default ``--backend``.
        kinds: The accepted ``--backend`` values (the registry's, plus a command's own).
        kinds_help: What a command's own kinds mean, appended to the help.
        shapes: Also offer ``--drafter`` and ``--larger`` (several drafters, model chains).
    """
    parser.add_argument(
        "--backend",
        default=default,
        choices=list(kinds),
        help="fake: canned offline answers (no model); vllm: in-process vLLM engines; "
        "transformers: Hugging Face models in-process; openai: OpenAI-compatible servers "
        "(vllm serve, vllm-router; --small/--large are the served model names)" + kinds_help,
    )
    parser.add_argument("--small", help="small model: checkpoint path, hub id or served name")
    parser.add_argument("--large", help="large model: checkpoint path, hub id or served name")
    for role, port in (("small", 8000), ("large", 8001)):
        parser.add_argument(
            f"--{role}-backend",
            choices=list(BACKENDS),
            help=f"the {role} model's kind, overriding --backend (mixed deployments)",
        )
        parser.add_argument(
            f"--{role}-url",
            help=f"the {role} model's server (a vllm serve or vllm-router base URL, e.g. "
            f"http://10.0.0.5:{port}/v1); makes it remote. Its API key: "
            f"MAI_GRAPH_{role.upper()}_API_KEY (default with --backend openai: "
            f"http://127.0.0.1:{port}/v1)",
        )
    if shapes:
        parser.add_argument(
            "--drafter",
            action="append",
            metavar="MODEL",
            help="another small drafter model beside --small (same kind and server); repeat "
            "for more. Every drafter answers short; see the draft_quorum setting",
        )
        parser.add_argument(
            "--larger",
            action="append",
            metavar="MODEL",
            help="a model larger than --large, the next stage of a chain (same kind and "
            "server as --large); repeat for more, smallest first",
        )
    parser.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        help="remote models: longest a request may take",
    )
    parser.add_argument(
        "--request-retries",
        type=int,
        metavar="N",
        help="remote models: resend a request that failed before its answer started "
        "(connection error, 429, 5xx) up to N times (default 2)",
    )


def backends_from_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """The (small, large) backends the flags of :func:`add_backend_flags` name.

    With ``--drafter`` the small side is a list of drafters (``--small`` first); with
    ``--larger`` the large side is a chain (``--large`` first): what
    :func:`~mai_graph.graph.create_mai_graph` and :func:`~mai_graph.api.arun` take.
    """
    return lineup_for(
        args.backend,
        args.small,
        args.large,
        drafters=getattr(args, "drafter", None) or (),
        larger=getattr(args, "larger", None) or (),
        urls=(args.small_url, args.large_url),
        kinds=(args.small_backend, args.large_backend),
        api_keys=api_keys_from_env(),
        timeout_s=args.request_timeout,
        retries=args.request_retries,
    )


def lineup_for(
    kind: str,
    small: str | None,
    large: str | None,
    *,
    drafters: Sequence[str] = (),
    larger: Sequence[str] = (),
    names: tuple[str, str] = ("--drafter", "--larger"),
    **settings: Any,
) -> tuple[Any, Any]:
    """:func:`backends_for`, plus more drafters beside ``small`` and a chain after ``large``.

    Each added model has the kind, server, key and request settings of the model it joins.
    Without ``drafters`` and ``larger`` this is :func:`backends_for`; with them a side is a
    list (drafters, or the chain smallest first). ``names`` names the two settings in errors;
    ``settings`` go to :func:`backends_for`.

    Raises:
        ConfigError: Added models with fake backends, or two models of the lineup with one
            name.
    """
    small_backend, large_backend = backends_for(kind, small, large, **settings)
    added = {"small": list(drafters), "large": list(larger)}
    if not any(added.values()):
        return small_backend, large_backend
    urls = settings.get("urls", (None, None))
    kinds = settings.get("kinds", (None, None))
    keys = settings.get("api_keys", (None, None))
    sides: dict[str, list[Any]] = {"small": [small_backend], "large": [large_backend]}
    for i, role in enumerate(ROLES):
        chosen = _kind_of(kind, kinds[i], urls[i])
        if added[role] and chosen == "fake":
            raise ConfigError(
                f"{names[i]} needs real models; the fake backend is one canned pair",
                parameter=names[i],
                value=added[role],
                fix=f"choose a vllm, transformers or openai backend (or drop {names[i]})",
            )
        for model in added[role]:
            sides[role].append(
                backend_for(
                    chosen,
                    model,
                    role=role,
                    url=urls[i],
                    api_key=keys[i],
                    timeout_s=settings.get("timeout_s"),
                    retries=settings.get("retries"),
                )
            )
    models = [b.name for side in sides.values() for b in side]
    if len(set(models)) != len(models):
        raise ConfigError(
            f"two models of this lineup share a name: {models}",
            parameter="/".join(names),
            value=models,
            fix="give each drafter and chain stage its own model",
        )
    return (
        sides["small"] if len(sides["small"]) > 1 else small_backend,
        sides["large"] if len(sides["large"]) > 1 else large_backend,
    )
