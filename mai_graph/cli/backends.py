"""The model flags every command shares, and the lineup and backends they name.

The flags translate into :func:`mai_graph.deploy.select.lineup_spec` and
:func:`~mai_graph.deploy.select.build_lineup` (the plain-argument functions the library,
LangGraph Studio and the endpoint use). API keys come from the environment, never from flags
(which other users of the machine can read).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from mai_graph.backends.base import Side
from mai_graph.deploy.select import BACKENDS, api_keys_from_env, build_lineup, lineup_spec
from mai_graph.deploy.spec import LineupSpec

__all__ = ["add_backend_flags", "backends_from_args", "lineup_from_args"]


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
        default: The default ``--backend`` (a ``--lineup`` file's kind wins over it).
        kinds: The accepted ``--backend`` values (the registry's, plus a command's own).
        kinds_help: What a command's own kinds mean, appended to the help.
        shapes: Also offer ``--drafter`` and ``--larger`` (several drafters, model chains).
    """
    parser.set_defaults(backend_default=default)
    parser.add_argument(
        "--backend",
        default=None,
        choices=list(kinds),
        help="fake: canned offline answers (no model); vllm: in-process vLLM engines; "
        "transformers: Hugging Face models in-process; openai: OpenAI-compatible servers "
        "(vllm serve, vllm-router; --small/--large are the served model names)"
        + kinds_help
        + f" (default: {default}, or the --lineup file's)",
    )
    parser.add_argument("--small", help="small model: checkpoint path, hub id or served name")
    parser.add_argument("--large", help="large model: checkpoint path, hub id or served name")
    parser.add_argument(
        "--lineup",
        metavar="FILE",
        help="every model with its kind, server and engine options, in a TOML or JSON file "
        "(docs/engines.md; default: the file $MAI_GRAPH_LINEUP names); the flags here "
        "override it",
    )
    engine_help = (
        "an engine option KEY=VALUE (VALUE is JSON where it parses): any vLLM AsyncEngineArgs "
        "field (max_model_len, gpu_memory_utilization, dtype, quantization, kv_cache_dtype, "
        "tensor_parallel_size, max_num_seqs, enforce_eager, limit_mm_per_prompt, "
        "mm_processor_kwargs, device_ids, ...) or kv_cache_gib / max_restarts; repeatable"
    )
    parser.add_argument(
        "--engine", action="append", default=[], metavar="KEY=VALUE",
        help=f"every model: {engine_help}",
    )  # fmt: skip
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
        parser.add_argument(
            f"--{role}-engine", action="append", default=[], metavar="KEY=VALUE",
            help=f"the {role} model only: {engine_help}",
        )  # fmt: skip
    if shapes:
        parser.add_argument(
            "--drafter",
            action="append",
            metavar="MODEL",
            help="another small drafter model beside --small (same kind and server); repeat "
            "for more. Every drafter answers short; see the draft_quorum setting",
        )
        parser.add_argument(
            "--drafter-engine", action="append", default=[], metavar="KEY=VALUE",
            help="engine options of each --drafter model (as --small-engine)",
        )  # fmt: skip
        parser.add_argument(
            "--larger",
            action="append",
            metavar="MODEL",
            help="a model larger than --large, the next stage of a chain (same kind and "
            "server as --large); repeat for more, smallest first",
        )
        parser.add_argument(
            "--larger-engine", action="append", default=[], metavar="KEY=VALUE",
            help="engine options of each --larger model (as --large-engine)",
        )  # fmt: skip
    parser.add_argument(
        "--gpu-memory",
        metavar="SIZE",
        help="plan the engines' memory as if the card had SIZE free (e.g. 40GiB, 24GB; "
        "default: what the GPU reports). The plan fills gpu_memory_utilization and "
        "max_model_len you did not set; `mai-graph plan` shows it",
    )
    parser.add_argument(
        "--no-plan",
        action="store_true",
        help="start the engines with the options as given (no memory plan)",
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


def lineup_from_args(args: argparse.Namespace) -> LineupSpec:
    """The :class:`~mai_graph.deploy.spec.LineupSpec` the flags declare.

    ``--lineup FILE`` first (else the file ``$MAI_GRAPH_LINEUP`` names, as Studio reads it),
    the other flags of :func:`add_backend_flags` over it.
    """
    from mai_graph.deploy.spec import engine_options_from_items, load_lineup

    if getattr(args, "lineup", None):
        base = load_lineup(args.lineup)
    elif os.environ.get("MAI_GRAPH_LINEUP", "").strip():
        base = load_lineup(os.environ["MAI_GRAPH_LINEUP"], flag="MAI_GRAPH_LINEUP")
    else:
        base = None
    kind = args.backend or (None if base is not None else getattr(args, "backend_default", "fake"))
    items = engine_options_from_items
    return lineup_spec(
        kind,
        args.small,
        args.large,
        drafters=getattr(args, "drafter", None) or (),
        larger=getattr(args, "larger", None) or (),
        urls=(args.small_url, args.large_url),
        kinds=(args.small_backend, args.large_backend),
        common_engine=items(getattr(args, "engine", None) or [], "--engine"),
        engines=(
            items(getattr(args, "small_engine", None) or [], "--small-engine"),
            items(getattr(args, "large_engine", None) or [], "--large-engine"),
        ),
        added_engines=(
            items(getattr(args, "drafter_engine", None) or [], "--drafter-engine"),
            items(getattr(args, "larger_engine", None) or [], "--larger-engine"),
        ),
        timeout_s=args.request_timeout,
        retries=args.request_retries,
        base=base,
    )


def backends_from_args(args: argparse.Namespace, *, context: Any = None) -> tuple[Side, Side]:
    """The (small, large) backends the flags of :func:`add_backend_flags` name.

    With ``--drafter`` the small side is a list of drafters (``--small`` first); with
    ``--larger`` the large side is a chain (``--large`` first): what
    :func:`~mai_graph.graph.create_mai_graph` and :func:`~mai_graph.api.arun` take. The memory
    plan runs first (see :func:`~mai_graph.deploy.select.build_lineup`) unless ``--no-plan``;
    ``context`` (the run settings) sizes its workload.
    """
    return build_lineup(
        lineup_from_args(args),
        api_keys=api_keys_from_env(),
        context=context,
        plan=not getattr(args, "no_plan", False),
        gpu_memory=getattr(args, "gpu_memory", None),
    )
