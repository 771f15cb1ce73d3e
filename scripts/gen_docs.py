#!/usr/bin/env python3
"""The generated blocks of docs/ stay equal to the code.

A block is the text between ``<!-- begin:NAME -->`` and ``<!-- end:NAME -->`` in a page; the
blocks below are written from the code:

- ``settings`` in docs/settings.md: every ``MAIContext`` field, its default, the values it
  allows and its description;
- ``backends`` in docs/engines.md: every backend, its ``--backend`` name and capabilities.

Without arguments the stale blocks are rewritten (and named); ``--check`` writes nothing,
names every stale block and exits 1 when there is one (tests/project/test_docs.py runs the check).

    python scripts/gen_docs.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the checkout's mai_graph
    sys.path.insert(0, str(ROOT))


def _range(info: Any) -> str:
    bounds = {}
    for meta in info.metadata:
        for attr in ("gt", "ge", "lt", "le"):
            if getattr(meta, attr, None) is not None:
                bounds[attr] = getattr(meta, attr)
    if not bounds:
        return ""
    lo = f"({bounds['gt']}" if "gt" in bounds else f"[{bounds.get('ge', '-inf')}"
    hi = f"{bounds['lt']})" if "lt" in bounds else f"{bounds.get('le', 'inf')}]"
    return f"{lo}, {hi}"


def settings() -> str:
    """The settings reference: one row per ``MAIContext`` field."""
    from typing import get_args

    from mai_graph import MAIContext

    rows = ["| setting | default | allowed | what it does |", "|---|---|---|---|"]
    for name, info in MAIContext.model_fields.items():
        values = [v for arg in (info.annotation, *get_args(info.annotation)) for v in get_args(arg)]
        literal = [v for v in values if isinstance(v, str)]
        allowed = ", ".join(f"`{v}`" for v in literal) if literal else _range(info)
        text = " ".join((info.description or "").split())
        rows.append(f"| `{name}` | `{info.default!r}` | {allowed} | {text} |")
    return "\n".join(rows) + "\n"


def backends() -> str:
    """The backend table: each backend class, its ``--backend`` name, what it can do."""
    from mai_graph.backends.fake import FunctionBackend, ScriptedBackend
    from mai_graph.backends.openai import OpenAIBackend
    from mai_graph.backends.transformers import TransformersBackend
    from mai_graph.backends.vllm import VLLMBackend
    from mai_graph.engines.select import BACKENDS

    members = {
        "streaming": ("generate_stream",),
        "logprobs": ("supports_logprobs",),
        "vocabulary": ("vocab_fingerprint",),
        "attention": ("attention",),
        "managed engine": ("start", "shutdown"),
    }
    listed = (
        (VLLMBackend, "vllm"),
        (OpenAIBackend, "openai"),
        (TransformersBackend, "transformers"),
        (ScriptedBackend, "-"),
        (FunctionBackend, "fake"),
    )
    named = {cli for _, cli in listed if cli != "-"}
    if named != set(BACKENDS):
        raise RuntimeError(f"the backend table names {sorted(named)}, the CLI has "
                         f"{sorted(BACKENDS)}: add the new backend to backends()")  # fmt: skip
    rows = [
        "| backend | `--backend` | " + " | ".join(members) + " |",
        "|---|---|" + "---|" * len(members),
    ]
    for cls, cli in listed:
        marks = ["yes" if all(hasattr(cls, m) for m in ms) else "-" for ms in members.values()]
        rows.append(f"| `{cls.__name__}` | {cli} | " + " | ".join(marks) + " |")
    return "\n".join(rows) + "\n"


BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    ("docs/settings.md", "settings"): settings,
    ("docs/engines.md", "backends"): backends,
}
"""(page relative to the checkout, block name) -> the function that writes the block."""


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- begin:{name} -->\n)(.*?)(<!-- end:{name} -->)", re.DOTALL)


def update(root: Path = ROOT, *, write: bool = True) -> list[str]:
    """The blocks under ``root`` that differ from the code (``page: block``), each rewritten
    when ``write``; a page that lost a block is named too (and never written)."""
    stale = []
    for (page, name), generate in BLOCKS.items():
        path = root / page
        text = path.read_text()
        match = _pattern(name).search(text)
        if match is None:
            stale.append(f"{page}: block {name!r} is missing (<!-- begin:{name} --> ... "
                         f"<!-- end:{name} -->)")  # fmt: skip
            continue
        generated = generate()
        if match.group(2) == generated:
            continue
        stale.append(f"{page}: block {name!r}")
        if write:
            path.write_text(text[: match.start(2)] + generated + text[match.end(2) :])
    return stale


def check(root: Path = ROOT) -> list[str]:
    """The stale blocks under ``root``, nothing written (empty: the docs match the code)."""
    return update(root, write=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = check() if args.check else update()
    missing = [line for line in stale if "is missing" in line]
    for line in stale:
        print(line if line in missing else f"{'stale' if args.check else 'rewrote'} {line}")
    if args.check and stale:
        print("regenerate with: python scripts/gen_docs.py")
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
