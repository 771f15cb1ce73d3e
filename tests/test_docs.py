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
