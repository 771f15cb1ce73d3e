"""A lineup's backends, after the memory plan: what every door calls."""

from __future__ import annotations

from typing import Any

from mai_graph.backends.base import Side
from mai_graph.deploy.plan import plan_for_start
from mai_graph.deploy.spec import LineupSpec

__all__ = ["build_lineup"]


def build_lineup(
    lineup: LineupSpec,
    *,
    where: str = "--small/--large",
    api_keys: tuple[str | None, str | None] = (None, None),
    plan: bool = True,
    context: Any = None,
    gpu_memory: str | None = None,
) -> tuple[Side, Side]:
    """The backends of ``lineup`` (nothing starts), planned first.

    With ``plan`` (the default) and in-process vLLM models, the memory plan runs first
    (:func:`~mai_graph.deploy.plan.plan_for_start`): on a GPU it fills each engine's unset
    ``gpu_memory_utilization`` and ``max_model_len``, and a lineup that cannot fit is refused
    here, before any engine starts; on the CPU it checks what it can read.

    Args:
        lineup: The declared models.
        where: How errors name the small / large models.
        api_keys: The small / large remote servers' keys.
        plan: Run the memory plan (``False``: start the engines exactly as declared).
        context: The run settings (``MAIContext``) that size the plan's workload.
        gpu_memory: Plan for at most this much free memory per card (``"40GiB"``).

    Returns:
        What :func:`~mai_graph.graph.create_mai_graph` takes: ``(small, large)``, a side being
        a list when it has several models.

    Raises:
        ConfigError: Invalid lineups and options; ``PlanError`` when it cannot fit.
    """
    checked = lineup.checked(where)  # the one check of every option
    if plan:
        checked = plan_for_start(checked, context=context, gpu_memory=gpu_memory)
    return checked.build(where=where, api_keys=api_keys, checked=True)
