"""Check the import contracts of pyproject.toml on the package as it is installed.

``nodes/`` sits at the top of the repository but is installed as ``mai_graph.nodes``
(``[tool.setuptools.package-dir]``), and every import names it so. import-linter reads a
package from its folder on disk, where ``mai_graph/nodes`` does not exist: run on the
repository as it is, it never sees an import of a node module, so no contract could fail
through one (a cycle ``graph -> nodes.prepare -> graph`` passed). This script copies the
Python files into a scratch folder laid out as installed (``nodes/*.py`` under
``mai_graph/nodes/``), writes the contracts with ``nodes`` spelled ``mai_graph.nodes``, and
runs ``lint-imports`` there.

    python scripts/lint_imports.py            # the repository
    python scripts/lint_imports.py --root DIR # another checkout (the tests plant cycles)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def installed_name(module: str) -> str:
    """A module's name as installed: ``nodes.x`` is ``mai_graph.nodes.x``.

    >>> installed_name("nodes"), installed_name("nodes.prepare"), installed_name("mai_graph.api")
    ('mai_graph.nodes', 'mai_graph.nodes.prepare', 'mai_graph.api')
    """
    return "mai_graph." + module if module == "nodes" or module.startswith("nodes.") else module


def _rename(value: Any) -> Any:
    if isinstance(value, str):
        return installed_name(value)
    if isinstance(value, list):
        return list(dict.fromkeys(_rename(v) for v in value))
    return value


def contracts_as_installed(config: dict[str, Any]) -> dict[str, Any]:
    """The ``[tool.importlinter]`` table with module names as installed."""
    out = {k: _rename(v) for k, v in config.items() if k != "contracts"}
    roots = out.get("root_packages", [])  # mai_graph.nodes is no root: it is in mai_graph
    out["root_packages"] = [r for r in roots if not any(r.startswith(o + ".") for o in roots)]
    out["contracts"] = [
        {k: (v if k in ("id", "name", "type") else _rename(v)) for k, v in c.items()}
        for c in config.get("contracts", [])
    ]
    return out


def _toml(config: dict[str, Any]) -> str:
    """The table as TOML (strings, lists of strings and booleans only: JSON spells them so)."""
    lines = ["[tool.importlinter]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in config.items() if k != "contracts"]
    for contract in config["contracts"]:
        lines += ["", "[[tool.importlinter.contracts]]"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in contract.items()]
    return "\n".join(lines) + "\n"


def lay_out(root: Path, into: Path) -> None:
    """Copy the package's Python files from ``root`` into ``into`` as they are installed."""
    for src, dst in (
        (root / "mai_graph", into / "mai_graph"),
        (root / "nodes", into / "mai_graph" / "nodes"),
    ):
        for file in src.rglob("*.py"):
            target = dst / file.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to check")
    args = parser.parse_args(argv)
    config = tomllib.loads((args.root / "pyproject.toml").read_text())["tool"]["importlinter"]
    with tempfile.TemporaryDirectory(prefix="mai-imports-") as scratch:
        view = Path(scratch)
        lay_out(args.root, view)
        (view / "pyproject.toml").write_text(_toml(contracts_as_installed(config)))
        env = {**os.environ, "PYTHONPATH": str(view)}  # ahead of the editable install's finder
        linter = Path(sys.executable).with_name("lint-imports")
        cmd = [str(linter), str(view / "pyproject.toml"), "--no-cache"]
        return subprocess.run(cmd, cwd=view, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
