"""Deployments as declared and as planned: one spec per model, a memory plan for a lineup.

Nothing here runs an engine: specs are checked, planned and turned into backends, whose
engines start on first use (``mai_graph.backends``). Earlier versions named this package
``mai_graph.engines``; that path still imports it.

- :mod:`~mai_graph.deploy.spec`: :class:`ModelSpec` (a model, its backend kind, server and
  engine options) and :class:`LineupSpec` (small, large, drafters, chain), read from Python,
  flags, the environment or a lineup file (TOML / JSON), checked before any engine starts;
- :mod:`~mai_graph.deploy.shape`: what a checkpoint weighs and what its KV cache costs, from
  its local config files;
- :mod:`~mai_graph.deploy.plan`: the memory plan of co-resident engines (shares, context
  lengths, concurrent runs), refused with the numbers and fixes when it cannot fit;
- :mod:`~mai_graph.deploy.build`: :func:`build_lineup`, the plan then the backends (every
  door's way in).
"""

from mai_graph.deploy.build import build_lineup
from mai_graph.deploy.plan import (
    Device,
    MemoryPlan,
    PlanError,
    Workload,
    parse_size,
    plan_for_start,
    plan_memory,
    probe_devices,
)
from mai_graph.deploy.shape import ModelShape, read_shape
from mai_graph.deploy.spec import LineupSpec, ModelSpec, load_lineup

__all__ = [
    "Device",
    "LineupSpec",
    "MemoryPlan",
    "ModelShape",
    "ModelSpec",
    "PlanError",
    "Workload",
    "build_lineup",
    "load_lineup",
    "parse_size",
    "plan_for_start",
    "plan_memory",
    "probe_devices",
    "read_shape",
]
