"""Import paths of modules that moved, kept working: ``mai_graph.serve`` is the endpoint, etc.

The package's layout shows its layers (the core at the root; ``inputs/``, ``backends/``,
``adapters/``, ``cli/`` and the tools around it). Paths that the documentation of earlier
versions gave, and code in the wild imports, resolve to the module that now holds the code: the
same module object, so ``monkeypatch`` and ``isinstance`` see one thing. New code imports the
new paths; these aliases import nothing until asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "mai_graph.sources": "mai_graph.inputs.sources",
    "mai_graph.images": "mai_graph.inputs.images",
    "mai_graph.media": "mai_graph.inputs.video",
    "mai_graph.limits": "mai_graph.inputs.limits",
    "mai_graph.requests": "mai_graph.calls",
    "mai_graph.langchain": "mai_graph.adapters.langchain",
    "mai_graph.decisions": "mai_graph.adapters.decisions",
    "mai_graph.studio": "mai_graph.adapters.studio",
    "mai_graph.serve": "mai_graph.adapters.endpoint",
    "mai_graph.serve_metrics": "mai_graph.adapters.endpoint.metrics",
    "mai_graph.profile": "mai_graph.latency.profile",
    "mai_graph.testing": "mai_graph.tiny.build",
    "mai_graph.qwen_vocab": "mai_graph.tiny.qwen_vocab",
    "mai_graph.demo": "mai_graph.tiny.demo",
    "mai_graph.backends.select": "mai_graph.engines.select",
    "mai_graph.engines.bench": "mai_graph.latency.bench",
    "mai_graph.eval.cli": "mai_graph.cli.eval",
    "mai_graph.pair.cli": "mai_graph.cli.pair",
}
"""Old module path -> the module that holds its code now."""


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder whose modules are other modules: importing an old path imports the new one."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its own name."""


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once; ``import mai_graph`` calls this)."""
    if not any(isinstance(f, _Aliases) for f in sys.meta_path):
        sys.meta_path.append(_Aliases())
