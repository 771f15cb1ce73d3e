"""The trained tiny pair: two small Qwen3-VL models (a toy) that answer the synthetic task.

The package ships four pairs (:data:`PAIRS`): ``v1`` in ``models/`` (five plain templates),
``v2`` in ``models_v2/`` (compositional questions where reasoning helps, task ``v2``), ``v3``
in ``models_v3/`` (arrows to follow, where the large model needs reasoning, task ``v3``; its
sparsification ablation in ``ablation.json``) and ``v4`` in ``models_v4/`` (arrows followed
from a named cell, task ``v4``: reasoning pays for both models). Each holds
``small/`` and ``large/`` in the Hugging Face layout (config, bf16 safetensors, tokenizer,
processor, chat template) and ``manifest.json`` (how they were trained, their held-out
accuracies and agreement, the quality gates and the sha256 of every file). They answer
questions about the pictures of :mod:`mai_graph.eval.synthetic` (shapes in a 4x4 grid, bar
charts) through the graph's real prompts, on every backend; nothing else. See
``docs/tiny-pair.md``; :mod:`mai_graph.pair.train` (``mai-graph train-pair``) retrains them.

Example:
    >>> small, large = trained_pair_paths()
    >>> small.name, large.name
    ('small', 'large')
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from mai_graph.errors import ConfigError

__all__ = [
    "DEFAULT_PAIR",
    "PAIRS",
    "PAIR_DIR",
    "pair_root",
    "file_checksums",
    "read_manifest",
    "trained_backends",
    "trained_pair_paths",
    "verify_pair",
]

PAIRS: dict[str, Path] = {
    "v1": Path(__file__).resolve().parent / "models",
    "v2": Path(__file__).resolve().parent / "models_v2",
    "v3": Path(__file__).resolve().parent / "models_v3",
    "v4": Path(__file__).resolve().parent / "models_v4",
}
"""The shipped pairs by name (each folder holds ``small/``, ``large/``, ``manifest.json``)."""

DEFAULT_PAIR = "v2"
"""The pair ``mai-graph demo`` and ``mai-graph pair`` use unless told otherwise. ``v3`` or
``v4`` becomes the default only when its manifest's gates pass (tests/tools/test_pair.py
checks it)."""

PAIR_DIR = PAIRS["v1"]
"""Where the first shipped pair lives (``v1``)."""


def pair_root(name: str | os.PathLike[str] | None = None) -> Path:
    """The folder of a shipped pair by name (None: the default), or a folder.

    >>> pair_root("v1") == PAIR_DIR
    True
    """
    if name is None:
        return PAIRS[DEFAULT_PAIR]
    if isinstance(name, str) and name in PAIRS:
        return PAIRS[name]
    path = Path(name)
    if isinstance(name, str) and not path.exists() and "/" not in name:
        raise ConfigError(
            f"no shipped pair named {name!r}; the shipped pairs are {sorted(PAIRS)}",
            parameter="pair",
            value=name,
            fix=f"use one of {sorted(PAIRS)}, or the folder of a pair you trained",
        )
    return path


def trained_pair_paths(root: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """The ``(small, large)`` folders of a trained pair (default: the default shipped pair)."""
    base = pair_root(root)
    return base / "small", base / "large"


def read_manifest(root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The pair's ``manifest.json``.

    Raises:
        ConfigError: The folder holds no manifest (not a trained pair).
    """
    from mai_graph.files import read_text
    from mai_graph.jsonin import parse_json

    path = pair_root(root) / "manifest.json"
    fix = "train one with `mai-graph train-pair DIR`, or use the shipped pair"
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"no trained pair at {path.parent} (manifest.json missing)",
                          parameter="root", value=str(path.parent), fix=fix)  # fmt: skip
    data = parse_json(read_text(path, flag="root", what="pair manifest"), parameter="root",
                      what=f"the pair manifest {path}", fix=fix)  # fmt: skip
    if not isinstance(data, dict):
        raise ConfigError(f"the pair manifest {path} is not a JSON object", parameter="root",
                          value=str(path), fix=fix)  # fmt: skip
    return data


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_checksums(root: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of every file under ``root/small`` and ``root/large``, by relative path."""
    base = Path(root)
    return {
        p.relative_to(base).as_posix(): _sha256(p)
        for sub in ("small", "large")
        for p in sorted((base / sub).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def verify_pair(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Problems with a pair's files against its manifest (empty when every file matches).

    >>> verify_pair()
    []
    """
    base = pair_root(root)
    expected = read_manifest(base).get("checksums") or {}
    actual = file_checksums(base)
    problems = [f"missing: {name}" for name in sorted(set(expected) - set(actual))]
    problems += [f"not in the manifest: {name}" for name in sorted(set(actual) - set(expected))]
    problems += [
        f"checksum differs: {name}"
        for name in sorted(set(expected) & set(actual))
        if expected[name] != actual[name]
    ]
    return problems


def trained_backends(
    kind: str = "vllm", root: str | os.PathLike[str] | None = None
) -> tuple[Any, Any]:
    """Backends named ``trained-small`` / ``trained-large`` over a trained pair (verified first).

    ``kind`` is ``vllm`` or ``transformers``. Nothing is started.

    Raises:
        ConfigError: A file of the pair is missing or changed.
    """
    from mai_graph.deploy.select import backends_for

    if kind not in ("vllm", "transformers"):
        raise ConfigError(
            f"trained-pair backends are vllm or transformers, got {kind!r}",
            parameter="kind",
            value=kind,
        )
    problems = verify_pair(root)
    if problems:
        raise ConfigError(
            f"the trained pair's files do not match its manifest: {'; '.join(problems[:3])}",
            parameter="root",
            value=str(pair_root(root)),
            fix="reinstall mai-graph, or retrain with `mai-graph train-pair DIR`",
        )
    small_dir, large_dir = trained_pair_paths(root)
    small, large = backends_for(kind, str(small_dir), str(large_dir))
    small.name, large.name = "trained-small", "trained-large"
    return small, large
