#!/usr/bin/env python3
"""The generated blocks of docs/ stay equal to the code.

A block is the text between ``<!-- begin:NAME -->`` and ``<!-- end:NAME -->`` in a page; the
blocks below are written from the code:

- ``settings`` in docs/settings.md: every ``MAIContext`` field, its default, the values it
  allows and its description;
- ``backends`` in docs/engines.md: every backend, its ``--backend`` name and capabilities;
- ``pair-default`` in README.md: the default trained pair's measured accuracy and latency (its
  manifest's ``evaluation``);
- ``pair-v1`` to ``pair-v4`` in docs/tiny-pair.md: a trained pair's measured
  tables (its manifest, and the sparsification ablation in ``ablation.json`` beside it), and
  ``pair-v1-models`` to ``pair-v4-models``: its two models (sizes, training
  time and compute, decode speed);
- ``recorded:NAME`` in any page: what a command printed, from the results file
  ``docs/results/NAME.json`` it wrote (``--results``), with its command, versions, machine and
  date (see :mod:`mai_graph.results`).

Without arguments the stale blocks are rewritten (and named); ``--check`` writes nothing,
names every stale block and exits 1 when there is one (tests/project/test_docs.py runs the check).

    python scripts/gen_docs.py [--check]
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the checkout's mai_graph
    sys.path.insert(0, str(ROOT))

from mai_graph.errors import ConfigError  # noqa: E402 (after the path above)
from mai_graph.eval.report import percent  # noqa: E402


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
    from mai_graph.backends.base import capabilities_of
    from mai_graph.backends.fake import FunctionBackend, ScriptedBackend
    from mai_graph.backends.openai import OpenAIBackend
    from mai_graph.backends.transformers import TransformersBackend
    from mai_graph.backends.vllm import VLLMBackend
    from mai_graph.deploy.select import BACKENDS

    members = {
        "streaming": "stream",
        "logprobs": "logprobs",
        "distributions": "distribution",
        "vocabulary": "vocabulary",
        "attention": "attention",
        "managed engine": "managed",
    }
    listed = (  # an instance of each (nothing starts or loads until a request)
        (VLLMBackend("m"), "vllm"),
        (OpenAIBackend.from_url("http://127.0.0.1:9/v1", "m"), "openai"),
        (TransformersBackend("m"), "transformers"),
        (ScriptedBackend("A"), "-"),
        (FunctionBackend(lambda request: "A"), "fake"),
    )
    named = {cli for _, cli in listed if cli != "-"}
    if named != set(BACKENDS):
        raise RuntimeError(f"the backend table names {sorted(named)}, the CLI has "
                         f"{sorted(BACKENDS)}: add the new backend to backends()")  # fmt: skip
    rows = [
        "| backend | `--backend` | " + " | ".join(members) + " |",
        "|---|---|" + "---|" * len(members),
    ]
    for backend, cli in listed:
        caps = capabilities_of(backend)
        marks = ["yes" if getattr(caps, field) else "-" for field in members.values()]
        rows.append(f"| `{type(backend).__name__}` | {cli} | " + " | ".join(marks) + " |")
    return "\n".join(rows) + "\n"


_POLICY_NAMES = {"small": "small", "large": "large", "mai": "MAI", "small_cot": "small_cot",
                 "large_cot": "large_cot"}  # fmt: skip


def pair_default() -> str:
    """The default pair's measured accuracy and mean latency per policy (README.md)."""
    from mai_graph.pair import DEFAULT_PAIR, read_manifest

    m = read_manifest()
    ev = m["evaluation"]
    p = ev["policies"]
    rows = [
        f"The default pair ({DEFAULT_PAIR}, task {m['task']}) measured on {ev['n']} held-out "
        f"questions (seed {ev['seed']}) on {ev['engine']} CPU engines, from its manifest:",
        "",
        "| policy | accuracy | mean latency |",
        "|---|---:|---:|",
    ]
    for k in ("small", "large", "mai", "large_cot"):
        rows.append(f"| {_POLICY_NAMES[k]} | {percent(p[k]['accuracy'])} | "
                    f"{p[k]['mean_latency_ms']:.0f} ms |")  # fmt: skip
    return "\n".join(rows) + "\n"


def _task(m: dict[str, Any]) -> str:
    return m.get("task", "v1")  # v1's manifest predates the field (train-pair's default task)


def _minutes(model: dict[str, Any]) -> str:
    """Training wall time in minutes, one term per run (``38 + 30`` for a continued model)."""
    runs = model.get("runs") or [model]
    return " + ".join(f"{r['wall_s'] / 60:.0f}" for r in runs)


def _flops(model: dict[str, Any]) -> str:
    return f"{model['train_flops']:.1e} FLOPs".replace("e+", "e")


def pair_models(name: str) -> str:
    """A trained pair's two models side by side, from its manifest: sizes, what each sees,
    training time, steps and compute, decode speed (docs/tiny-pair.md)."""
    from mai_graph.pair import read_manifest

    m = read_manifest(name)
    speed = m["speed"]

    def sees(x: dict[str, Any]) -> str:
        side = x["spec"]["image_side"]  # 32 pixels per visual token a side (PairSpec)
        tokens = (side // 32) ** 2
        return f"{side}x{side} pixels, {tokens} visual token{'s' if tokens > 1 else ''}"

    def tiny(x: dict[str, Any], key: str) -> Any:
        return x["spec"]["tiny"][key]

    decode = f"decode on {speed['engine']} (CPU), per token"
    cells: dict[str, Callable[[dict[str, Any]], str]] = {
        "language model": lambda x: f"{tiny(x, 'num_layers')} layers, width "
                                    f"{tiny(x, 'hidden_size')}",
        "picture seen as": sees,
        "vision tower (random, frozen)": lambda x: f"{tiny(x, 'vision_depth')} blocks, width "
                                                   f"{tiny(x, 'vision_hidden')}",
        "parameters": lambda x: f"{x['parameters']:,}",
        "training": lambda x: f"{_minutes(x)} min, {x['steps']:,} steps of {x['spec']['batch']}",
        "training compute": _flops,
        decode: lambda x: f"{speed[x['role']]['per_token_ms']:.1f} ms",
    }  # fmt: skip
    ratios = {"training compute": f"{m['compute_ratio_large_over_small']:.1f}x",
              decode: f"{speed['ratio']:.2f}x"}  # fmt: skip
    small, large = m["models"]["small"], m["models"]["large"]
    rows = [f"Trained with `--task {_task(m)}`, seed {m['seed']}, from the manifest:", "",
            "| | small | large |", "|---|---:|---:|"]  # fmt: skip
    for label, cell in cells.items():
        ratio = f" ({ratios[label]})" if label in ratios else ""
        rows.append(f"| {label} | {cell(small)} | {cell(large)}{ratio} |")
    return "\n".join(rows) + "\n"


def pair_tables(name: str = "v3") -> str:
    """A trained pair's measured tables: short answers, policies, transfer, routes, gates and
    the sparsification ablation (docs/tiny-pair.md)."""
    import json

    from mai_graph.pair import PAIRS, read_manifest

    m = read_manifest(name)
    out = [
        f"Held-out short answers ({m['heldout']['n']:,} items, seed {m['heldout']['seed']}, "
        "transformers, greedy):",
        "",
        "| template | small | large |",
        "|---|---:|---:|",
    ]
    for t in m["small"]["by_template"]:
        out.append(f"| {t} | {percent(m['small']['by_template'][t])} | "
                   f"{percent(m['large']['by_template'][t])} |")  # fmt: skip
    out.append(f"| **overall** | **{percent(m['small']['accuracy'])}** | "
               f"**{percent(m['large']['accuracy'])}** |")  # fmt: skip
    a = m["agreement"]
    out += ["", f"They agree on {percent(a['share'])} of the items and are right on "
            f"{percent(a['accuracy_when_agree'])} of those; where they disagree the large model is "
            f"right on {percent(a['large_right_when_disagree'])} and the small one on "
            f"{percent(a['small_right_when_disagree'])}."]  # fmt: skip
    ev = m.get("evaluation")
    if ev:
        p = ev["policies"]
        # manifests written before the concurrency was recorded were measured with 8
        flight = ev.get("concurrency") or 8
        load = "one run at a time" if flight == 1 else f"{flight} runs in flight per policy"
        out += [
            "",
            f"Every policy on {ev['n']} held-out items (seed {ev['seed']}), {ev['engine']} CPU "
            f"engines, {load}, every branch recorded (MAI replayed under the default gate):",
            "",
            "| policy | accuracy | mean ms | reasoning tokens per run |",
            "|---|---:|---:|---:|",
        ]
        for k, label in _POLICY_NAMES.items():
            tokens = p[k]["reasoning_tokens"]
            used = ", ".join(f"{v:.0f} ({r})" for r, v in tokens.items() if v) or "0"
            out.append(f"| {label} | {percent(p[k]['accuracy'])} | "
                       f"{p[k]['mean_latency_ms']:.0f} | {used} |")  # fmt: skip
        routes = p["mai"]["routes"]
        out += ["", "MAI's routes: " + ", ".join(f"{r} {percent(v)}" for r, v in routes.items())
                + "."]  # fmt: skip
        apart = (p["mai"].get("transfer") or {}).get("disagreements") or {}
        if apart.get("full"):
            out += [
                "",
                "The transfer, read against copied (the runs whose short answers disagreed):",
                "",
                "| what the large model read | n | after reading | its own short answer | "
                "gain | copies the small model |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for label, key in (("the sparsified reasoning", "full"),
                               ("the same, its stated answer masked", "masked")):  # fmt: skip
                b = apart.get(key)
                if b:
                    out.append(
                        f"| {label} | {b['n']} | {percent(b['transfer_accuracy'])} | "
                        f"{percent(b['large_short_accuracy'])} | {100 * b['gain']:+.1f} | "
                        f"{percent(b['copy']['small'])} |"
                    )
    out += ["", "| gate | measured | |", "|---|---|---|"]
    for g in m["gates"]:
        out.append(f"| {g['name']} | {g['detail']} | {'pass' if g['passed'] else 'FAIL'} |")
    out += ["", f"All gates passed: {'yes' if m['gates_passed'] else 'no'}."]
    ablation = PAIRS[name] / "ablation.json"
    if ablation.is_file():
        from mai_graph.eval.ablation import format_ablation

        result = json.loads(ablation.read_text())
        out += ["", f"Sparsification ablation (`mai-graph eval --sparsify-ablation`, "
                f"{result.get('backend', '?')} backend):", "", format_ablation(result)]  # fmt: skip
    return "\n".join(out) + "\n"


def paper_beside_pairs() -> str:
    """The paper's headline claims beside what the trained pairs measured here (their
    manifests' evaluations): accuracy and mean latency of MAI, ``large_cot`` and the large
    model's short answer (docs/evaluation.md)."""
    from mai_graph.pair import PAIRS, read_manifest

    measured = []
    for name in PAIRS:
        ev = read_manifest(name).get("evaluation")
        if ev:
            measured.append((name, ev))
    head = "| | the paper (Qwen3-VL pairs, GPU; reported, not measured here) | " + " | ".join(
        f"pair {n} here ({ev['n']} held-out, {ev['engine']} CPU)" for n, ev in measured
    )
    rows = [head + " |", "|---|---|" + "---|" * len(measured)]

    def row(label: str, paper: str, cell: Callable[[dict[str, Any]], str]) -> None:
        cells = [cell(ev["policies"]) for _, ev in measured]
        rows.append(f"| {label} | {paper} | " + " | ".join(cells) + " |")

    def speed(p: dict[str, Any], other: str) -> str:
        ratio = p[other]["mean_latency_ms"] / p["mai"]["mean_latency_ms"]
        return f"{ratio:.2f}x" + (" (MAI slower)" if ratio < 1 else "")

    row(
        "MAI vs the large model reasoning (`large_cot`): accuracy",
        "approaches it",
        lambda p: f"{percent(p['mai']['accuracy'])} vs {percent(p['large_cot']['accuracy'])}",
    )
    row("MAI speedup over `large_cot` (mean latency)", "up to 8x", lambda p: speed(p, "large_cot"))
    row(
        "MAI vs the large model's short answer: accuracy",
        "-",
        lambda p: f"{percent(p['mai']['accuracy'])} vs {percent(p['large']['accuracy'])}",
    )
    row("MAI speedup over the large short answer", "-", lambda p: speed(p, "large"))  # fmt: skip
    return "\n".join(rows) + "\n"


BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    ("docs/evaluation.md", "paper-beside-pairs"): paper_beside_pairs,
    ("docs/settings.md", "settings"): settings,
    ("docs/engines.md", "backends"): backends,
    ("README.md", "pair-default"): pair_default,
    **{
        ("docs/tiny-pair.md", f"pair-{n}"): functools.partial(pair_tables, n)
        for n in ("v1", "v2", "v3", "v4")
    },
    **{
        ("docs/tiny-pair.md", f"pair-{n}-models"): functools.partial(pair_models, n)
        for n in ("v1", "v2", "v3", "v4")
    },
}
"""(page relative to the checkout, block name) -> the function that writes the block."""


RESULTS = ROOT / "docs" / "results"
"""The results files measuring commands wrote (``--results FILE``); recorded blocks read them."""
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f\u2028\u2029\ufffe\uffff]")
"""Characters a page shows escaped (``\\x10``): random-weight models print them."""
_RECORDED = re.compile(r"<!-- begin:recorded:([\w.-]+) -->")


def describe_machine(results: dict[str, Any]) -> str:
    """``vLLM 0.32.0, 2-CPU AMD EPYC (Linux x86_64)``: what a record was measured with."""
    m = results["machine"]
    versions = results["versions"]
    used = [f"{label} {versions[key]}" for key, label in (("vllm", "vLLM"), ("torch", "torch"))
            if versions.get(key)]  # fmt: skip
    device = m.get("accelerator") or f"{m.get('cpus')}-CPU {m.get('cpu')}"
    return ", ".join([f"mai-graph {results['version']}", *used, f"{device} ({m['platform']})"])


def recorded(name: str, page: str) -> str:
    """The block of a recorded command: its command line, provenance and printed output."""
    from mai_graph.results import read_results

    path = RESULTS / f"{name}.json"
    r = read_results(path)
    link = path.relative_to(ROOT / Path(page).parent).as_posix() if page.startswith("docs/") \
        else path.relative_to(ROOT).as_posix()  # fmt: skip
    fence = "````" if any(line.startswith("```") for line in r["output"]) else "```"
    lines = [_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", line) for line in r["output"]]
    return (
        f"Recorded by `{r['command']}` ({describe_machine(r)}, {r['date'][:10]}; "
        f"[{path.name}]({link})):\n\n{fence}text\n" + "\n".join(lines) + f"\n{fence}\n"
    )


def blocks(root: Path = ROOT) -> dict[tuple[str, str], Callable[[], str]]:
    """Every generated block: :data:`BLOCKS` and the recorded blocks the pages hold."""
    found = dict(BLOCKS)
    for page in PAGES:
        path = root / page
        if not path.is_file():
            continue
        for name in _RECORDED.findall(path.read_text()):
            found[(page, f"recorded:{name}")] = lambda n=name, p=page: recorded(n, p)
    return found


def _pattern(name: str) -> re.Pattern[str]:
    name = re.escape(name)
    return re.compile(rf"(<!-- begin:{name} -->\n)(.*?)(<!-- end:{name} -->)", re.DOTALL)


def update(root: Path = ROOT, *, write: bool = True) -> list[str]:
    """The blocks under ``root`` that differ from the code (``page: block``), each rewritten
    when ``write``; a page that lost a block is named too (and never written)."""
    stale = []
    for (page, name), generate in blocks(root).items():
        path = root / page
        text = path.read_text()
        match = _pattern(name).search(text)
        if match is None:
            stale.append(f"{page}: block {name!r} is missing (<!-- begin:{name} --> ... "
                         f"<!-- end:{name} -->)")  # fmt: skip
            continue
        try:
            generated = generate()
        except ConfigError as exc:  # a recorded block whose results file is missing or broken
            stale.append(f"{page}: block {name!r} is missing its source: {exc}")
            continue
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
    missing = [line for line in stale if "is missing" in line]  # a block or its results file
    for line in stale:
        print(line if line in missing else f"{'stale' if args.check else 'rewrote'} {line}")
    if args.check and stale:
        print("regenerate with: python scripts/gen_docs.py")
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
