"""Every example runs from a clean checkout: offline on the fake backend, and on tiny models."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


def run_example(path, **env):
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=600,
        env={**os.environ, **env}, cwd=path.parent.parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"quickstart.py", "chat_agent.py", "langchain_chain.py"}


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_offline(path):
    out = run_example(path, MAI_GRAPH_BACKEND="fake")
    assert "route" in out


@pytest.mark.engine
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_on_tiny_models(path, tiny_pair):
    small, large = (str(p) for p in tiny_pair)
    out = run_example(
        path, MAI_GRAPH_BACKEND="transformers", MAI_GRAPH_SMALL=small, MAI_GRAPH_LARGE=large
    )
    assert "route" in out
