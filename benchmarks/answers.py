"""Answer extraction speed: per-call time on typical outputs, worst case on long adversarial ones.

Extraction runs on every short answer the gate compares and on every output a scorer reads,
so it must be cheap on typical outputs and linear on anything: a runaway generation or an
adversarial string must not stall a run.

    python benchmarks/answers.py [--rounds 5] [--size 100000]

Prints two tables: per kind, the median time per call over a set of typical outputs (short
answers and chain-of-thought endings), and per kind, the worst time over long inputs of
``--size`` characters (repeated digits, letters, statements, hedges, markup, prose...) with
the input that was slowest.
"""

import argparse
import statistics
import sys
import time

from mai_graph.answers import extract_answer
from mai_graph.results import RESULTS_HELP, command_line, recording

CARS = ["a red car", "a blue bus", "a green bike", "a yellow truck"]

TYPICAL = {
    "choice": [
        "B",
        "(C)",
        "The answer is B.",
        "Answer: D. Option C would need a wider road.",
        "D, since C shows a bike.",
        "\\boxed{D}",
        "a blue bus",
        "I'd go with C",
        "<think>The vehicle is long and blue, with many windows, so it is a bus.</think>B",
        "Looking at the image, the vehicle is blue and carries passengers. The answer is B.",
    ],
    "yes_no": [
        "Yes",
        "No.",
        "Yes, there is a dog on the sofa.",
        "No, the light is not red.",
        "There is no doubt that the cat is black.",
        "Not necessarily.",
        "I don't think so.",
        "The answer is yes.",
    ],
    "number": [
        "7",
        "4.1k",
        "30%",
        "1987",
        "7:45 pm",
        "There are 3 cats and 2 dogs, so the answer is 5.",
        "The total is 8; the chart also lists 20 and 35.",
        "About 2.5 million people.",
        "Looking at the bars, 2019 is the highest at 45.6, so the answer is 45.6.",
    ],
    "text": [
        "dog",
        "A red car.",
        "The U.S.",
        "It's a dog.",
        "The answer is: a red CAR",
        "Two dogs playing frisbee in a park.",
    ],
    "auto": [
        "Yes.",
        "4 birds",
        "There are 4 birds.",
        "$3.50",
        "March 5, 1987",
        "It is red.",
        "The Seven Dwarfs!",
        "I can't tell.",
    ],
}


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def adversarial(size: int) -> dict[str, str]:
    """Long inputs that stress each reader (the same families the speed tests use)."""
    units = {
        "numbers": "1 ",
        "grouped": "1,000,",
        "ranges": "3-",
        "times": "7:45:",
        "number words": "one hundred and ",
        "pronoun one": "the one ",
        "zeros": "no ",
        "dates": "March 5, ",
        "labels": "A. ",
        "hedges": "A or ",
        "verdicts": "A is correct ",
        "statements": "the answer is ",
        "totals": "the total is ",
        "so": "so ",
        "negations": "not ",
        "negated options": "not a red car ",
        "option texts": "red car blue bus ",
        "no doubt": "no doubt ",
        "think open": "<think>",
        "boxed": "\\boxed{",
        "chinese": "答案",
        "underscores": "_a_",
        "prose": "The quick brown fox jumps over the lazy dog. ",
    }
    inputs = {name: _repeat(unit, size) for name, unit in units.items()}
    inputs.update(digits="9" * size, currency="$" * size, letters="a" * size, spaces=" " * size)
    return inputs


def _time(fn, rounds: int) -> float:
    """Median seconds per call over ``rounds`` rounds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (median)")
    parser.add_argument("--size", type=int, default=100_000, help="long input length")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/answers.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        measure(args, rec.data)


def measure(args: argparse.Namespace, data: dict) -> None:
    """Print both tables; put their figures in ``data`` (µs and ms, as printed)."""
    typical, long = data.setdefault("typical", {}), data.setdefault("long", {"size": args.size})
    print("typical outputs: median time per call")
    print(f"{'kind':8} {'outputs':>8} {'median µs':>10} {'max µs':>10}")
    for kind, texts in TYPICAL.items():
        options = CARS if kind == "choice" else None
        per_text = [
            _time(
                lambda t=t, k=kind, o=options: [extract_answer(t, k, o) for _ in range(100)],
                args.rounds,
            )
            / 100
            for t in texts
        ]
        median, worst = statistics.median(per_text) * 1e6, max(per_text) * 1e6
        print(f"{kind:8} {len(texts):8d} {median:10.1f} {worst:10.1f}")
        typical[kind] = {"outputs": len(texts), "median_us": median, "max_us": worst}

    long_inputs = adversarial(args.size)
    print(f"\nlong inputs ({args.size:,} chars, {len(long_inputs)} kinds): worst time per call")
    print(f"{'kind':8} {'worst ms':>9} {'median ms':>10}  slowest input")
    for kind in TYPICAL:
        options = CARS if kind == "choice" else None
        times = {
            name: _time(lambda t=text, k=kind, o=options: extract_answer(t, k, o), args.rounds)
            for name, text in long_inputs.items()
        }
        slowest = max(times, key=times.__getitem__)
        median = statistics.median(times.values())
        print(f"{kind:8} {times[slowest] * 1e3:9.1f} {median * 1e3:10.1f}  {slowest}")
        long[kind] = {
            "worst_ms": times[slowest] * 1e3,
            "median_ms": median * 1e3,
            "slowest": slowest,
        }


if __name__ == "__main__":
    main()
