import os
import re
from pathlib import Path

from mai_graph.graph import mermaid

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_architecture_diagram_matches_the_compiled_graph():
    text = (DOCS / "architecture.md").read_text()
    block = re.search(r"```mermaid\n(.*?)```", text, re.DOTALL)
    assert block, "docs/architecture.md lost its mermaid block"
    assert block.group(1).strip() == mermaid().strip(), "regenerate it with `mai-graph diagram`"


def test_docs_name_every_node_and_route():
    text = (DOCS / "nodes.md").read_text()
    for name in ("verify", "reason", "extract", "sparsify", "answer"):
        assert f"## `{name}`" in text
    for route in ("agree", "extract_agree", "transfer", "small_cot", "large_cot"):
        assert route in text


# -- lists that can be generated stay equal to the code ------------------------------------------
# Blocks between <!-- begin:NAME --> and <!-- end:NAME --> are generated here;
# `MAI_REGEN_DOCS=1 pytest tests/test_docs.py` rewrites them.


def _block(path: Path, name: str, generated: str) -> None:
    text = path.read_text()
    pattern = re.compile(rf"(<!-- begin:{name} -->\n)(.*?)(<!-- end:{name} -->)", re.DOTALL)
    match = pattern.search(text)
    assert match, f"{path.name} lost its generated block {name!r}"
    if os.environ.get("MAI_REGEN_DOCS"):
        path.write_text(text[: match.start(2)] + generated + text[match.end(2) :])
        return
    assert match.group(2) == generated, (
        f"{path.name}: block {name!r} drifted from the code; "
        "regenerate with MAI_REGEN_DOCS=1 pytest tests/test_docs.py"
    )


def _range(info) -> str:
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


def test_settings_reference_lists_every_context_field():
    from typing import get_args

    from mai_graph import MAIContext

    rows = ["| setting | default | allowed | what it does |", "|---|---|---|---|"]
    for name, info in MAIContext.model_fields.items():
        values = [v for arg in (info.annotation, *get_args(info.annotation)) for v in get_args(arg)]
        literal = [v for v in values if isinstance(v, str)]
        allowed = ", ".join(f"`{v}`" for v in literal) if literal else _range(info)
        text = " ".join((info.description or "").split())
        rows.append(f"| `{name}` | `{info.default!r}` | {allowed} | {text} |")
    _block(DOCS / "settings.md", "settings", "\n".join(rows) + "\n")


def test_backend_table_lists_every_backend_and_its_capabilities():
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
    rows = [
        "| backend | `--backend` | " + " | ".join(members) + " |",
        "|---|---|" + "---|" * len(members),
    ]
    for cls, cli in (
        (VLLMBackend, "vllm"),
        (OpenAIBackend, "openai"),
        (TransformersBackend, "transformers"),
        (ScriptedBackend, "-"),
        (FunctionBackend, "fake"),
    ):
        marks = ["yes" if all(hasattr(cls, m) for m in ms) else "-" for ms in members.values()]
        rows.append(f"| `{cls.__name__}` | {cli} | " + " | ".join(marks) + " |")
    assert {"vllm", "openai", "transformers", "fake"} == set(BACKENDS)
    _block(DOCS / "engines.md", "backends", "\n".join(rows) + "\n")


def test_node_reference_lists_every_sparsify_strategy_and_route():
    from typing import get_args

    from mai_graph.context import Gate, SparsifyStrategy
    from mai_graph.state import Route

    text = (DOCS / "nodes.md").read_text()
    for literal, name in ((SparsifyStrategy, "strategies"), (Route, "routes"), (Gate, "gates")):
        match = re.search(rf"<!-- begin:{name} -->\n(.*?)<!-- end:{name} -->", text, re.DOTALL)
        assert match, f"nodes.md lost its {name} list"
        listed = re.findall(r"^- `([a-z_0-9]+)`", match.group(1), re.MULTILINE)
        assert listed == list(get_args(literal)), f"nodes.md {name}: {listed}"


def test_every_figure_in_the_docs_says_where_it_comes_from(capsys):
    """scripts/check_figures.py (also a step of .ci/run): no number in README.md or docs/
    without a command that prints it or a label (modelled, a source, an expectation)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "check_figures", DOCS.parent / "scripts" / "check_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    status = module.main([])
    assert status == 0, capsys.readouterr().out


def test_the_figure_check_catches_an_unlabelled_number(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "check_figures", DOCS.parent / "scripts" / "check_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\nMAI is 3.2x faster and 12% more accurate.\n\n"
        "Measured by `python benchmarks/engines.py`: 2.9x.\n\n"
        "## Section\n\n*Figures in this section: printed by `mai-graph eval` here.*\n\n"
        "It took 40 ms.\n\n## Next\n\nThe answer is `0.5` in code, and 7 ms here.\n"
    )
    problems = module.check(page)
    assert [p.split(": ", 1)[1].split("  <-")[0] for p in problems] == ["3.2x, 12%", "7 ms"]
    page.write_text(
        "# A page\n\nMeasured by `python benchmarks/nowhere.py`: 2.9x.\n\n"
        "## Section\n\n*Figures in this section: e.g. from somewhere.*\n\nIt took 40 ms.\n"
    )
    problems = module.check(page)
    assert "names files that do not exist: ['benchmarks/nowhere.py']" in problems[0]
    assert "a figures marker must name a command" in problems[1] and "40 ms" in problems[2]
