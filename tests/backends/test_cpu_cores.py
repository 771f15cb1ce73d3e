"""How a lineup's CPU engines split the cores (mai_graph.backends.vllm.startup.cpu_cores)."""

import pytest

from mai_graph.backends.vllm.startup import EngineGroup, cpu_cores


class _Handle:
    def __init__(self, **engine_kwargs):
        self._engine_kwargs = engine_kwargs


def _lineup(n, **kwargs):
    group = EngineGroup()
    handles = [_Handle(**kwargs) for _ in range(n)]
    for h in handles:
        group.add(h)
    return handles


@pytest.fixture(autouse=True)
def _no_user_binding(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)


@pytest.mark.parametrize("cores", [2, 3, 8, 16, 17])
@pytest.mark.parametrize("engines", [2, 3, 4])
def test_the_blocks_are_disjoint_contiguous_and_cover_every_core(cores, engines):
    handles = _lineup(engines)
    blocks = [[int(c) for c in cpu_cores(h, range(cores)).split(",")] for h in handles]
    if cores <= engines:
        assert [b[0] for b in blocks] == [i % cores for i in range(engines)]
        return
    flat = [c for b in blocks for c in b]
    assert flat == list(range(cores))  # disjoint, in order, every core once
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_the_cores_this_process_may_use_are_split_not_the_machines():
    small, large = _lineup(2)
    assert (cpu_cores(small, [5, 7]), cpu_cores(large, [7, 5])) == ("5", "7")


def test_a_lone_engine_a_tensor_parallel_one_and_a_user_setting_keep_vllms_choice(monkeypatch):
    (alone,) = _lineup(1)
    assert cpu_cores(alone, range(4)) is None
    assert cpu_cores(_Handle(), range(4)) is None  # no lineup at all
    tp, other = _lineup(2, tensor_parallel_size=2)
    assert cpu_cores(tp, range(4)) is None
    small, large = _lineup(2)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    assert cpu_cores(small, range(4)) is None


def test_without_per_process_core_sets_nothing_is_bound(monkeypatch):
    import os

    small, large = _lineup(2)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert cpu_cores(small) is None
