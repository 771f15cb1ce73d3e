"""Clear errors for backends whose optional dependencies are not installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

__all__ = ["require_extra"]


def require_extra(backend: str, modules: Sequence[str], extra: str) -> None:
    """Raise an ``ImportError`` naming the extra to install when a module is missing.

    Checked at the backend module's import, without importing the (heavy) modules themselves.

    >>> require_extra("fake", ["json"], "none")
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"the {backend} backend needs {', '.join(missing)}, which is not installed: "
            f'pip install "mai-graph[{extra}]"'
            + (" (on a CPU-only machine: scripts/install-cpu.sh)" if extra == "vllm" else "")
        )
