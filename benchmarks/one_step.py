"""What one-step verification costs against a generated short answer, per call, on vLLM CPU.

    python benchmarks/one_step.py [--pair v2] [--items 24] [--rounds 5]

On the trained tiny pair's engines (``mai-graph pair``), the verification calls of held-out
bounded questions (multiple choice, yes / no) are made two ways, interleaved per round: read off
one decode step with the distribution over the allowed answers (``verify_distribution``, the
default), and generated as before (constrained to the option letters; yes / no unconstrained).
Prints, per model, the median per-call latency of each way, the ratio, the share of calls whose
answer is the same both ways, and the generated tokens.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mai_graph import MAIContext
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.calls import read_question, short_request
from mai_graph.deploy.select import backends_for
from mai_graph.eval.datasets import load_dataset
from mai_graph.eval.synthetic import make_synthetic
from mai_graph.pair import PAIRS, trained_pair_paths
from mai_graph.results import RESULTS_HELP, command_line, recording


async def main(args: argparse.Namespace) -> dict:
    small_dir, large_dir = trained_pair_paths(PAIRS[args.pair])
    with tempfile.TemporaryDirectory() as tmp:
        data = load_dataset(make_synthetic(Path(tmp) / "data", n=args.items * 3, seed=4242,
                                           task=args.pair))  # fmt: skip
        bounded = [s for s in data.samples if s.kind in ("choice", "yes_no")][: args.items]
        models = list(backends_for("vllm", str(small_dir), str(large_dir)))  # planned together
        models[0].name, models[1].name = "small", "large"
        await start_backends(*models)
        try:
            one_ctx, gen_ctx = MAIContext(), MAIContext(verify_distribution=False)
            questions = []
            for s in bounded:
                ctx = one_ctx.replace(answer_kind=s.kind)
                questions.append(await asyncio.to_thread(read_question, s.graph_input(), ctx))
            rows = []
            for backend in models:
                times: dict[str, list[float]] = {"one step": [], "generated": []}
                same = tokens_one = tokens_gen = total = 0
                for r in range(args.rounds):
                    order = ("one step", "generated") if r % 2 == 0 else ("generated", "one step")
                    answers: dict[str, list[str]] = {}
                    for way in order:
                        base = one_ctx if way == "one step" else gen_ctx
                        start = time.perf_counter()
                        got = []
                        for q, s in zip(questions, bounded):
                            ctx = base.replace(answer_kind=s.kind)
                            gen = await backend.generate(short_request(q, ctx))
                            got.append(gen.text.strip())
                            if way == "one step":
                                tokens_one += gen.generated_tokens
                            else:
                                tokens_gen += gen.generated_tokens
                        times[way].append((time.perf_counter() - start) / len(questions))
                        answers[way] = got
                    same += sum(a == b for a, b in zip(answers["one step"], answers["generated"]))
                    total += len(questions)
                a, b = statistics.median(times["one step"]), statistics.median(times["generated"])
                rows.append((backend.name, a, b, same / total, tokens_one / total,
                             tokens_gen / total))  # fmt: skip
        finally:
            shutdown_backends(*models)
    print(f"verification calls on the trained {args.pair} pair (vLLM CPU), {len(bounded)} bounded "
          f"questions x {args.rounds} rounds, medians per call:")  # fmt: skip
    print(f"  {'model':<6} {'one step ms':>12} {'generated ms':>13} {'ratio':>6} "
          f"{'same answer':>12} {'tokens':>12}")  # fmt: skip
    data: dict = {"questions": len(bounded), "rounds": args.rounds, "models": {}}
    for name, a, b, same, t1, t2 in rows:
        print(f"  {name:<6} {a * 1e3:>12.1f} {b * 1e3:>13.1f} {a / b:>6.2f} {same:>12.1%} "
              f"{t1:>5.1f} / {t2:<5.1f}")  # fmt: skip
        data["models"][name] = {
            "one_step_ms": a * 1e3, "generated_ms": b * 1e3, "ratio": a / b, "same_answer": same,
            "tokens_one_step": t1, "tokens_generated": t2,
        }  # fmt: skip
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="v2", choices=sorted(PAIRS))
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/one_step.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data.update(asyncio.run(main(args)))
