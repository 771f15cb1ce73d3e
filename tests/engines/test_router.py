"""Scale-out on real servers: two `vllm serve` replicas behind `vllm-router`, on loopback.

One module-scoped cluster: two replicas of the tiny small model behind two routers (consistent
hashing, and round robin for comparison), and one server of the tiny large model. Tests: the
affinity key keeps a run's calls on one replica and its prefix cache; mixed deployments
(in-process + remote, both remote from environment settings, the CLI); and last, a replica
killed mid-run.

(Without a key, this router's consistent hashing sends every chat request to one replica: it
hashes an empty key. So the comparison without the key is round robin, which spreads calls.)
"""

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from mai_graph import BackendError, MAIContext, arun, create_mai_graph
from mai_graph.backends.recording import RecordingBackend
from mai_graph.backends.render import common_prefix
from mai_graph.backends.steered import SteeredBackend
from mai_graph.tiny.build import draw_scene
from tests.cluster import finished, replicas, router, tokenize
from tests.servers import children, paused

pytestmark = [pytest.mark.engine, pytest.mark.server]

QUESTION = (
    "Look at the picture of coloured shapes on a grey background. Which colour is the large "
    "square in the centre of the image, and how does it compare with the smaller circle?"
)
OPTIONS = ["red", "blue", "green", "yellow"]
BLOCK = 32
COT = 32
TRANSFER = {"small": {"short": ["A"], "s2": ["C"]}, "large": {"short": ["B"]}}


@pytest.fixture(scope="module")
def cluster(tiny_pair, tmp_path_factory):
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    pytest.importorskip("openai", reason="installed with the openai extra")
    pytest.importorskip("vllm_router", reason="installed with the serve extra")
    small_dir, large_dir = tiny_pair
    logs = tmp_path_factory.mktemp("cluster")
    models = [("small-a", small_dir, "tiny-small"), ("small-b", small_dir, "tiny-small"),
              ("large", large_dir, "tiny-large")]  # fmt: skip
    with (
        replicas(models, logs) as (a, b, large),
        router([a, b], logs) as front,
        router([a, b], logs, name="router-rr", policy="round_robin") as spread,
    ):
        yield {"a": a, "b": b, "large": large, "router": front, "round_robin": spread}


def picture(i: int, folder) -> str:
    """A distinct image per run (its own pixels, so its own cache entries)."""
    return str(draw_scene(folder / f"picture-{i}.png", i))


def remote(url, model, *, affinity=True, **kwargs):
    from mai_graph.backends.openai import AFFINITY_HEADER, OpenAIBackend

    header = AFFINITY_HEADER if affinity else None
    return OpenAIBackend.from_url(url, model, affinity_header=header, **kwargs)


def steered(backend, role):
    return SteeredBackend(backend, TRANSFER[role])


def cached_share(calls, base, model):
    """Cached tokens of a run's follow-up small calls over their block-aligned shared prefix.

    The CoT call shares the short call's prompt prefix; the S2 call shares the CoT prompt and
    its generated reasoning (as the server re-tokenizes it). Both counted exactly with the
    server's own tokenizer (/tokenize).
    """
    from mai_graph.backends.openai import openai_messages

    by = {req.purpose: (req, gen) for req, gen in calls}
    tokens = {p: tokenize(base, model, openai_messages(by[p][0].messages)) for p in by}
    shared_cot = common_prefix(tokens["short"], tokens["cot"])
    cot_cache = tokens["cot"] + list(by["cot"][1].token_ids)
    shared_s2 = common_prefix(tokens["s2"], cot_cache)
    aligned = (shared_cot // BLOCK + shared_s2 // BLOCK) * BLOCK
    cached = by["cot"][1].cached_tokens + by["s2"][1].cached_tokens
    return cached, aligned


async def test_affinity_keeps_each_runs_calls_on_one_replica_and_its_cache(cluster, tmp_path):
    a, b, large_server = cluster["a"], cluster["b"], cluster["large"]
    context = MAIContext(cot_max_tokens=COT, cot_min_tokens=COT)
    stats = {True: {"stayed": 0, "cached": 0, "aligned": 0, "runs": 0},
             False: {"stayed": 0, "cached": 0, "aligned": 0, "runs": 0}}  # fmt: skip
    large = steered(remote(large_server.url, "tiny-large"), "large")
    for i in range(12):
        affinity = i % 2 == 0  # interleaved: consistent hashing on the key, or round robin
        front = cluster["router" if affinity else "round_robin"]
        small = RecordingBackend(
            steered(remote(front.url, "tiny-small", affinity=affinity), "small")
        )
        before = finished(a.base), finished(b.base)
        result = await arun(QUESTION, picture(i, tmp_path), small=small, large=large,
                            options=OPTIONS, context=context)  # fmt: skip
        assert result.route == "transfer"
        after = finished(a.base), finished(b.base)
        landed = sorted(y - x for x, y in zip(before, after))
        assert sum(landed) == 3  # short, CoT and S2 of the small model
        s = stats[affinity]
        s["runs"] += 1
        s["stayed"] += landed == [0, 3]
        cached, aligned = cached_share(small.calls, a.base, "tiny-small")
        s["cached"] += cached
        s["aligned"] += aligned
    with_key, without = stats[True], stats[False]
    report = {k: {"stayed": v["stayed"] / v["runs"], "cached": v["cached"] / v["aligned"]}
              for k, v in (("with", with_key), ("without", without))}  # fmt: skip
    print("affinity:", json.dumps(report))
    assert report["with"]["stayed"] == 1.0, report
    assert report["with"]["cached"] >= 0.9, report
    assert report["without"]["stayed"] < 1.0, report  # round robin spreads a run's calls
    assert report["with"]["cached"] > report["without"]["cached"], report


async def test_small_in_process_large_remote(cluster, tiny_pair, scene):
    from mai_graph.deploy.select import backends_for

    small, large = backends_for(
        "transformers", str(tiny_pair[0]), "tiny-large", urls=(None, cluster["large"].url)
    )
    assert type(small).__name__ == "TransformersBackend"
    small.name = "tiny-small"
    result = await arun(QUESTION, str(scene), small=steered(small, "small"),
                        large=steered(large, "large"), options=OPTIONS,
                        context=MAIContext(cot_max_tokens=COT, cot_min_tokens=COT))  # fmt: skip
    assert result.route == "transfer"
    models = {(m["node"], m["role"]): m["model"] for m in result.metrics}
    assert models[("reason", "small")] == "tiny-small"
    assert models[("answer", "large")] == "tiny-large"
    answer = next(m for m in result.metrics if m["node"] == "answer")
    assert answer["cached_tokens"] >= 64  # the remote large model's prefix cache served it


async def test_both_remote_from_environment_settings(cluster, scene):
    from mai_graph.deploy.select import backends_from_env

    env = {
        "MAI_GRAPH_SMALL_URL": cluster["router"].url,
        "MAI_GRAPH_SMALL": "tiny-small",
        "MAI_GRAPH_LARGE_URL": cluster["large"].url,
        "MAI_GRAPH_LARGE": "tiny-large",
        "MAI_GRAPH_REQUEST_TIMEOUT": "120",
        "MAI_GRAPH_REQUEST_RETRIES": "1",
    }
    small, large = backends_from_env(env)
    assert small.timeout_s == 120 and large.client.max_retries == 1
    result = await arun(QUESTION, str(scene), small=small, large=large, options=OPTIONS,
                        context=MAIContext(cot_max_tokens=COT))  # fmt: skip
    assert result.canonical in ("A", "B", "C", "D")
    assert {m["model"] for m in result.metrics} <= {"tiny-small", "tiny-large"}


def test_cli_mixes_an_in_process_small_model_with_a_remote_large_one(cluster, tiny_pair, scene):
    cmd = [sys.executable, "-m", "mai_graph.cli", "run", QUESTION, "--image", str(scene),
           "--small-backend", "transformers", "--small", str(tiny_pair[0]),
           "--large-url", cluster["large"].url, "--large", "tiny-large", "--json",
           "--cot-max-tokens", "16", *sum((["--option", o] for o in OPTIONS), [])]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    large_calls = [m for m in result["metrics"] if m["role"] == "large"]
    assert large_calls and {m["model"] for m in large_calls} == {"tiny-large"}


class Failures:
    """Counts the errors a backend raised (calls cut by the kill)."""

    def __init__(self, inner):
        self.inner, self.name, self.errors = inner, inner.name, []

    async def generate(self, request):
        try:
            return await self.inner.generate(request)
        except Exception as exc:
            self.errors.append(exc)
            raise


async def test_a_replica_killed_mid_run_fails_over_and_loses_no_run(cluster, tmp_path):
    """Last in the module: it kills one replica for good."""
    from langgraph.checkpoint.memory import InMemorySaver

    front, large_server = cluster["router"], cluster["large"]
    small = Failures(steered(remote(front.url, "tiny-small", max_retries=2), "small"))
    large = steered(remote(large_server.url, "tiny-large"), "large")
    graph = create_mai_graph(small, large).compile(checkpointer=InMemorySaver())
    context = MAIContext(cot_max_tokens=256, cot_min_tokens=256)
    n = 8

    def thread(i):
        return {"configurable": {"thread_id": f"failover-{i}"}}

    async def one(i):
        inputs = {"question": QUESTION, "image": picture(100 + i, tmp_path), "options": OPTIONS}
        return await graph.ainvoke(inputs, thread(i), context=context)

    # The replicas' engines are paused while the runs start, so the kill lands with requests in
    # flight however fast the engines are (a CPU engine that is generating can hold this
    # process back until it is done). The router's log says which replica got them.
    engines = children(cluster["a"].proc.pid) + children(cluster["b"].proc.pid)
    with paused(engines):
        seen = front.log.stat().st_size
        runs = [asyncio.create_task(one(i)) for i in range(n)]
        deadline = time.monotonic() + 120
        routed: dict[str, int] = {}
        while len(routed) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            text = front.log.read_text(errors="replace")[seen:]
            routed = {name: n_ for name in ("a", "b")
                      if (n_ := text.count(f"-> worker='{cluster[name].base}'"))}  # fmt: skip
            if routed and sum(routed.values()) >= n:
                break
        assert routed, "no run reached a replica"
        victim = cluster["b"] if "b" in routed else cluster["a"]
        survivor = cluster["a"] if victim is cluster["b"] else cluster["b"]
        killed_at = time.monotonic()
        victim.kill()
    outcomes = await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 240)
    bounded = time.monotonic() - killed_at
    assert small.errors, "the kill cut no call"
    assert all(isinstance(e, BackendError) and e.transient for e in small.errors), small.errors
    failed = [i for i, o in enumerate(outcomes) if isinstance(o, BaseException)]
    for i in failed:  # a failure is typed, and its run is kept at its last checkpoint
        assert isinstance(outcomes[i], BackendError), repr(outcomes[i])
        state = await graph.aget_state(thread(i))
        assert state.next, f"run {i} lost its checkpoint"
        outcomes[i] = await graph.ainvoke(None, thread(i), context=context)  # resumed
    assert all(o["route"] == "transfer" for o in outcomes)
    print(f"failover: {len(small.errors)} calls cut by the kill; {n - len(failed)}/{n} runs "
          f"failed over in flight, {len(failed)} resumed from their checkpoint; all settled "
          f"{bounded:.1f} s after the kill")  # fmt: skip
    # Later runs: served by the survivor alone.
    before = finished(survivor.base)
    later = await asyncio.gather(*(one(50 + i) for i in range(3)))
    assert all(o["route"] == "transfer" for o in later)
    assert finished(survivor.base) - before >= 9  # every small call of the three runs
    assert not victim.alive()
