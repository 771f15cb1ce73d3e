"""Read what mai-graph relies on out of vLLM wheels, without installing them.

    pip download --no-deps --only-binary=:all: vllm==0.34.0 -d WHEELS
    python scripts/vllm_api_extract.py WHEELS/vllm-0.34.0-*.whl [...]

writes ``tests/data/vllm_api/<version>.json`` per wheel: the fields of ``EngineArgs`` /
``AsyncEngineArgs``, ``SamplingParams`` and ``StructuredOutputsParams``; the ``CacheConfig``
defaults of ``gpu_memory_utilization`` and ``block_size``; the scheduler's default batch limits;
the quantization methods and KV-cache dtypes; the default worker start method; for every
internal name of :mod:`mai_graph.backends.vllm.compat`, whether the wheel's source defines it;
and the torch / transformers pins. ``tests/backends/test_vllm_versions.py`` checks the project
against every extract (CI needs no wheel). The source is parsed with :mod:`ast`, never run.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "vllm_api"
sys.path.insert(0, str(ROOT))


def _module(wheel: zipfile.ZipFile, module: str) -> ast.Module | None:
    for name in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
        try:
            return ast.parse(wheel.read(name).decode("utf-8"))
        except KeyError:
            continue
    return None


def _class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _fields(cls: ast.ClassDef | None) -> dict[str, str | None]:
    """Annotated class-level names and the source of their default (None: no default)."""
    out: dict[str, str | None] = {}
    for node in cls.body if cls else []:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None if node.value is None else ast.unparse(node.value)
    return out


def _members(cls: ast.ClassDef | None, tree: ast.Module | None = None) -> set[str]:
    """Methods, properties, class attributes and ``self.X`` assignments of a class, with those
    of its bases defined in the same module."""
    out: set[str] = set()
    for base in cls.bases if cls else []:
        name = base.id if isinstance(base, ast.Name) else None
        parent = _class(tree, name) if name else None
        if parent is not None and parent is not cls:
            out |= _members(parent, tree)
    for node in cls.body if cls else []:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.add(node.name)
            for sub in ast.walk(node):
                target = sub.value if isinstance(sub, ast.Attribute) else None
                stored = isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                if stored and isinstance(target, ast.Name) and target.id == "self":
                    out.add(sub.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _module_names(tree: ast.Module | None) -> set[str]:
    out: set[str] = set()
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _literal(tree: ast.Module | None, name: str) -> list[str]:
    """The string values of a module-level ``Name = Literal[...]``."""
    for node in tree.body if tree else []:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            return [c.value for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)]  # fmt: skip
    return []


def _class_constant(cls: ast.ClassDef | None, name: str) -> Any:
    for node in cls.body if cls else []:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id == name and node.value is not None:
                return ast.literal_eval(node.value)
    return None


def extract(path: Path) -> dict[str, Any]:
    """The extract of one wheel."""
    from mai_graph.backends.vllm.compat import STATIC_CHECKS

    wheel = zipfile.ZipFile(path)
    meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = wheel.read(meta_name).decode("utf-8")
    version = re.search(r"^Version: (.+)$", meta, re.MULTILINE).group(1).strip()  # type: ignore[union-attr]
    pins = sorted(
        line.split(":", 1)[1].strip()
        for line in meta.splitlines()
        if re.match(r"Requires-Dist: (torch|transformers)[ =<>!]", line)
    )
    args = _module(wheel, "vllm.engine.arg_utils")
    sampling = _module(wheel, "vllm.sampling_params")
    cache = _class(_module(wheel, "vllm.config.cache"), "CacheConfig")
    scheduler = _class(_module(wheel, "vllm.config.scheduler"), "SchedulerConfig")
    engine_args = set(_fields(_class(args, "EngineArgs"))) | set(
        _fields(_class(args, "AsyncEngineArgs"))
    )
    cache_fields = _fields(cache)
    envs = wheel.read("vllm/envs.py").decode("utf-8")
    method = re.search(r'"VLLM_WORKER_MULTIPROC_METHOD", "(\w+)"', envs)
    internals = {}
    for display, module, cls, attr in STATIC_CHECKS:
        tree = _module(wheel, module)
        names = _module_names(tree) if cls is None else _members(_class(tree, cls), tree)
        internals[display] = attr in names
    quant = _module(wheel, "vllm.model_executor.layers.quantization")
    return {
        "version": version,
        "source": path.name,
        "requires": pins,
        "engine_args": sorted(engine_args),
        "sampling_params": sorted(_fields(_class(sampling, "SamplingParams"))),
        "structured_outputs_params": sorted(_fields(_class(sampling, "StructuredOutputsParams"))),
        "max_logprob_token_ids": next(
            (
                ast.literal_eval(n.value)
                for n in (sampling.body if sampling else [])
                if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "MAX_LOGPROB_TOKEN_IDS"
            ),
            None,
        ),  # fmt: skip
        "cache_defaults": {
            "gpu_memory_utilization": cache_fields.get("gpu_memory_utilization"),
            "block_size": cache_fields.get("block_size"),
            "kv_cache_memory_bytes": "kv_cache_memory_bytes" in cache_fields,
            "enable_extensible_kv_cache": "enable_extensible_kv_cache" in cache_fields,
            "prefix_match_unit": "prefix_match_unit" in cache_fields,
        },
        "scheduler_defaults": {
            "max_num_batched_tokens": _class_constant(scheduler, "DEFAULT_MAX_NUM_BATCHED_TOKENS"),
            "max_num_seqs": _class_constant(scheduler, "DEFAULT_MAX_NUM_SEQS"),
        },
        "quantization_methods": _literal(quant, "QuantizationMethods"),
        "cache_dtypes": _literal(_module(wheel, "vllm.config.cache"), "CacheDType"),
        "worker_multiproc_method_default": method.group(1) if method else None,
        "internals": internals,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for wheel in args.wheels:
        data = extract(wheel)
        target = args.out / f"{data['version']}.json"
        target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        missing = [k for k, ok in data["internals"].items() if not ok]
        shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
        print(f"{shown}: {len(data['engine_args'])} engine args, "
              f"missing internals: {missing or 'none'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
