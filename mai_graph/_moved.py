"""Import paths of modules that moved, kept working: ``mai_graph.serve`` is the endpoint, etc.

The package's layout shows its layers (the core at the root; ``inputs/``, ``backends/``,
``adapters/``, ``cli/`` and the tools around it). Paths that the documentation of earlier
versions gave, and code in the wild imports, resolve to the code's home now:

- a module that moved whole (:data:`MOVED`) is the same module object under its old path, so
  ``monkeypatch`` and ``isinstance`` see one thing, and the module keeps its own
  ``__spec__``;
- a module whose names went to several homes (:data:`SPLIT`) is a small module of its own
  whose names are looked up in those homes, in order, when first asked for (PEP 562): the
  same objects, and an unknown name is an ``AttributeError`` naming the homes.

New code imports the new paths; these aliases import nothing until asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

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
    "mai_graph.backends.select": "mai_graph.deploy.select",
    "mai_graph.engines.bench": "mai_graph.latency.bench",
    # deployment specs, the memory plan and the backend factories: "engines" held no engine
    "mai_graph.engines": "mai_graph.deploy",
    "mai_graph.engines.build": "mai_graph.deploy.build",
    "mai_graph.engines.plan": "mai_graph.deploy.plan",
    "mai_graph.engines.select": "mai_graph.deploy.select",
    "mai_graph.engines.shape": "mai_graph.deploy.shape",
    "mai_graph.engines.spec": "mai_graph.deploy.spec",
    "mai_graph.eval.cli": "mai_graph.cli.eval",
    "mai_graph.pair.cli": "mai_graph.cli.pair",
}
"""Old module path -> the module that holds its code now."""

SPLIT = {
    # moved before their CLI parts went to mai_graph.cli and their checks to inputs.limits
    "mai_graph.images": ("mai_graph.inputs.images", "mai_graph.inputs.sources"),
    "mai_graph.media": ("mai_graph.inputs.video", "mai_graph.inputs.limits",
                        "mai_graph.inputs.sources"),
    "mai_graph.profile": ("mai_graph.latency.profile", "mai_graph.cli.profile"),
    "mai_graph.backends.select": ("mai_graph.deploy.select", "mai_graph.cli.backends"),
}  # fmt: skip
"""Old module path -> the modules its public names live in now, the first its main home."""
for _old in SPLIT:
    del MOVED[_old]


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder whose modules are other modules: importing an old path imports the new one."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED and fullname not in SPLIT:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name in SPLIT:
            return _split(spec.name, SPLIT[spec.name])
        module = importlib.import_module(MOVED[spec.name])
        self._own_spec[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: a moved module only gets back its own ``__spec__``.

        The import machinery's ``_init_module_attrs`` set it to the alias's.
        """
        own = self._own_spec.pop(module.__name__, None)
        if own is not None:
            module.__spec__ = own

    def __init__(self) -> None:
        self._own_spec: dict[str, Any] = {}


def _split(name: str, homes: tuple[str, ...]) -> ModuleType:
    """A module whose names are those of ``homes`` (the first home that has the name)."""
    module = ModuleType(name, f"Earlier path of names now in {', '.join(homes)}.")

    def __getattr__(attr: str) -> Any:
        if not attr.startswith("__"):
            for home in homes:
                found = getattr(importlib.import_module(home), attr, _MISSING)
                if found is not _MISSING:
                    return found
        raise AttributeError(
            f"module {name!r} has no attribute {attr!r} (its names moved to {', '.join(homes)})"
        )

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


_MISSING = object()


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once; ``import mai_graph`` calls this)."""
    if not any(isinstance(f, _Aliases) for f in sys.meta_path):
        # First: a submodule of a moved package (mai_graph.engines.spec) must resolve to the
        # moved module, not be found again by the path finder in the package's new folder (a
        # second module object). It answers only the names of MOVED and SPLIT.
        sys.meta_path.insert(0, _Aliases())
