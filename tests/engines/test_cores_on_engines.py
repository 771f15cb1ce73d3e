"""A lineup's CPU engines compute on cores of their own (mai_graph.backends.vllm.startup)."""

import os

import pytest

pytestmark = pytest.mark.engine


def _workers(backend):
    handle = getattr(backend, "handle", backend)
    return [p for p in handle._procs if p.name().startswith("VLLM::Worker")]


def test_the_small_and_large_engines_compute_on_cores_of_their_own(engines):
    kind, small, large = engines
    if kind != "vllm":
        pytest.skip("vLLM's CPU engines bind their threads; transformers runs in this process")
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        pytest.skip("the user's own binding wins")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: nothing to split")
    found = []
    for backend in (small, large):
        workers = _workers(backend)
        assert workers, "the engine's worker process was not found"
        found.append(set().union(*(set(w.cpu_affinity()) for w in workers)))
    assert found[0] and found[1] and not found[0] & found[1]
    assert found[0] | found[1] == set(cores)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ  # set only while an engine starts
