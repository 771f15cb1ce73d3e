import re
from pathlib import Path

import pytest

from mai_graph.graph import mermaid

DOCS = Path(__file__).resolve().parents[2] / "docs"


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


# -- blocks generated from the code stay equal to it ---------------------------------------------
# scripts/gen_docs.py writes the blocks between <!-- begin:NAME --> and <!-- end:NAME -->
# (settings, backends); `python scripts/gen_docs.py` rewrites them, `--check` only names them.


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, DOCS.parent / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_match_the_code_and_cover_every_setting_and_backend():
    from mai_graph import MAIContext
    from mai_graph.deploy.select import BACKENDS

    gen_docs = _script("gen_docs")
    stale = gen_docs.check()
    assert not stale, f"{stale}: regenerate with `python scripts/gen_docs.py`"
    rows = gen_docs.settings().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(MAIContext.model_fields)
    backends = [row.split(" | ")[1] for row in gen_docs.backends().splitlines()[2:]]
    assert {"vllm", "openai", "transformers", "fake"} == set(BACKENDS) == set(backends) - {"-"}


def test_the_doc_generator_names_a_stale_block_and_writes_only_when_asked(tmp_path, capsys):
    gen_docs = _script("gen_docs")
    for page, _ in gen_docs.BLOCKS:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((DOCS.parent / page).read_text())
    settings = tmp_path / "docs" / "settings.md"
    drifted = settings.read_text().replace("| `keep_ratio` |", "| `kept_ratio` |")
    settings.write_text(drifted)
    assert gen_docs.check(tmp_path) == ["docs/settings.md: block 'settings'"]
    assert settings.read_text() == drifted  # --check writes nothing
    assert gen_docs.update(tmp_path) == ["docs/settings.md: block 'settings'"]
    assert settings.read_text() == (DOCS / "settings.md").read_text()
    assert gen_docs.check(tmp_path) == []
    settings.write_text("# Settings\n")
    assert "block 'settings' is missing" in gen_docs.check(tmp_path)[0]


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


@pytest.mark.slow
def test_every_figure_in_the_docs_says_where_it_comes_from(capsys):
    """scripts/check_figures.py (also a step of .ci/run): no number in README.md or docs/
    without a command that prints it or a label (modelled, a source, an expectation)."""
    module = _script("check_figures")
    status = module.main([])
    assert status == 0, capsys.readouterr().out
