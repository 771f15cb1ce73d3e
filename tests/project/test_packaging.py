"""The top-level nodes/ folder installs as mai_graph.nodes, from a wheel and in editable mode."""

import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ("verify", "reason", "extract", "sparsify", "answer")


@pytest.mark.slow
def test_wheel_contains_nodes_and_imports_them(tmp_path):
    # Build from a copy: a build writes egg-info and build/ next to the sources.
    src = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".venv", ".git", ".ci-cache", "*.egg-info", "build", "__pycache__"
    )
    shutil.copytree(ROOT, src, ignore=skip)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path / "dist")],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("mai_graph-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for node in NODES:
        assert f"mai_graph/nodes/{node}.py" in names
    assert "mai_graph/py.typed" in names
    assert not any(n.startswith("nodes/") for n in names)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    code = (
        f"import sys; sys.path.insert(0, {str(target)!r}); import mai_graph.nodes.verify as v, "
        "mai_graph; print(v.__file__); print(mai_graph.create_mai_graph.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.splitlines()[0].startswith(str(target))


def test_installed_package_maps_nodes_folder():
    site = [p for p in sys.path if p and Path(p).resolve() != ROOT]
    (dist,) = importlib.metadata.distributions(name="mai-graph", path=site)
    direct = dist.read_text("direct_url.json")
    import mai_graph.nodes

    location = Path(mai_graph.nodes.__file__).resolve().parent
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        assert location == ROOT / "nodes"
    else:
        assert location.name == "nodes" and location.parent.name == "mai_graph"
