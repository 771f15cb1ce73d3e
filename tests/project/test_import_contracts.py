"""The import contracts see every layer, nodes/ included (scripts/lint_imports.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "lint_imports.py"


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for part in ("mai_graph", "nodes"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--root", str(root)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_the_repository_keeps_its_contracts():
    out = _lint(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # a cycle through a node: graph imports nodes.prepare, which would import graph
        ("nodes/prepare.py", "import mai_graph.graph", "No import cycles"),
        # a node importing a door
        ("nodes/answer.py", "import mai_graph.adapters.langchain", "imports no door"),
        # argparse in a node
        ("nodes/extract.py", "import argparse", "argparse lives in mai_graph.cli"),
        # the flow's pure decisions reaching up into the graph's nodes
        ("mai_graph/flow.py", "import mai_graph.nodes.verify", "The core in layers"),
        # a node building backends from deployment specs (the doors do that)
        ("nodes/prepare.py", "import mai_graph.deploy.plan", "deployment spec"),
        # a backend importing the owner object
        ("mai_graph/backends/wrapper.py", "import mai_graph.api", "The core in layers"),
    ],
)
def test_a_planted_import_breaks_a_contract(tmp_path, module, planted, broken):
    root = _checkout(tmp_path)
    file = root / module
    file.write_text(file.read_text().replace("from __future__ import annotations\n",
                                             f"from __future__ import annotations\n\n{planted}\n",
                                             1))  # fmt: skip
    assert planted in file.read_text()
    out = _lint(root)
    assert out.returncode != 0, out.stdout
    assert broken in out.stdout.replace("\n", " ") and "BROKEN" in out.stdout
