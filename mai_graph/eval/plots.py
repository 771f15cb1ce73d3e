"""PNG plots of an evaluation report and a calibration (matplotlib, Agg backend).

matplotlib is imported inside the functions (the ``eval`` extra installs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mai_graph.errors import ConfigError

__all__ = ["plot_calibration", "plot_report"]

_SMALL, _LARGE, _MAI, _OTHER = "#4C72B0", "#DD8452", "#55A868", "#8C8C8C"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError(
            "plots need matplotlib",
            parameter="plots",
            fix='pip install "mai-graph[eval]", or pass --no-plots',
        ) from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _front(points: Sequence[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points no other point beats on both lower x and higher y, by x."""
    out: list[tuple[float, float, str]] = []
    best = float("-inf")
    for p in sorted(points, key=lambda p: (p[0], -p[1])):
        if p[1] > best + 1e-12:
            out.append(p)
            best = p[1]
    return out


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    fig.clf()
    return path


def plot_report(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Draw the report's plots into ``out_dir``; returns ``{title: path}``.

    Accuracy vs mean latency per policy (with the Pareto front, and replayed MAI settings when
    recorded), MAI's route shares, generated tokens per model, and the gap-recovered curve.
    """
    plt = _pyplot()
    policies = report["policies"]
    out: dict[str, Path] = {}

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    cq = report.get("cost_quality") or {}
    curve = cq.get("curve") or []
    if curve:
        ax.scatter(
            [c["mean_latency_s"] * 1000 for c in curve],
            [c["accuracy"] for c in curve],
            s=8, color=_OTHER, alpha=0.35, label="MAI, other gate settings (replayed)",
        )  # fmt: skip
    points = [
        (s["latency_s"]["mean"] * 1000, s["accuracy"], p)
        for p, s in policies.items()
        if s["latency_s"]["mean"] is not None
    ]
    for x, y, name in points:
        ax.scatter([x], [y], s=50, color=_MAI if name == "mai" else _SMALL, zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=9)
    front = _front(points)
    if len(front) > 1:
        ax.plot([p[0] for p in front], [p[1] for p in front], "--", color=_MAI, lw=1,
                label="Pareto front (policies)")  # fmt: skip
    xs_all = [p[0] for p in points if p[0] > 0]
    if xs_all and max(xs_all) / min(xs_all) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("mean latency per run (ms, critical path)")
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy vs latency")
    ax.grid(alpha=0.3)
    if curve or len(front) > 1:
        ax.legend(fontsize=8, loc="lower right")
    out["Accuracy vs latency"] = _save(fig, out_dir / "accuracy_latency.png")
    plt.close(fig)

    costs = [
        (s["cost"]["per_1000"], s["accuracy"], p)
        for p, s in policies.items()
        if s.get("cost") and s["cost"]["per_1000"] is not None
    ]
    if costs:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for x, y, name in costs:
            ax.scatter([x], [y], s=50, color=_MAI if name == "mai" else _SMALL, zorder=3)
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=9)
        front = _front(costs)
        if len(front) > 1:
            ax.plot([p[0] for p in front], [p[1] for p in front], "--", color=_MAI, lw=1)
        ax.set_xlabel("cost per 1,000 questions (at the given token prices)")
        ax.set_ylabel("accuracy")
        ax.set_title("Accuracy vs cost")
        ax.grid(alpha=0.3)
        out["Accuracy vs cost"] = _save(fig, out_dir / "accuracy_cost.png")
        plt.close(fig)

    mai = policies.get("mai")
    if mai is not None:
        fig, ax = plt.subplots(figsize=(6.4, 3.2))
        routes = list(mai["routes"])
        shares = [mai["routes"][r]["share"] for r in routes]
        bars = ax.barh(routes, shares, color=_MAI)
        for bar, share in zip(bars, shares):
            ax.text(bar.get_width() + 0.01, bar.get_y() + bar.get_height() / 2,
                    f"{100 * share:.1f}%", va="center", fontsize=9)  # fmt: skip
        ax.set_xlim(0, 1.12)
        ax.invert_yaxis()
        ax.set_xlabel("share of runs")
        ax.set_title("MAI routes")
        out["MAI routes"] = _save(fig, out_dir / "routes.png")
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = list(policies)
    xs = range(len(names))
    small = [policies[p]["generated_tokens"]["small"] or 0 for p in names]
    large = [policies[p]["generated_tokens"]["large"] or 0 for p in names]
    ax.bar([x - 0.2 for x in xs], small, width=0.4, color=_SMALL, label="small model")
    ax.bar([x + 0.2 for x in xs], large, width=0.4, color=_LARGE, label="large model")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("generated tokens per run (mean)")
    ax.set_title("Tokens per model")
    ax.legend(fontsize=8)
    out["Tokens per model"] = _save(fig, out_dir / "tokens.png")
    plt.close(fig)

    if curve and any(c["gap_recovered"] is not None for c in curve):
        mine = (cq.get("transfer_share"), cq.get("gap_recovered"))
        out["Gap recovered vs transfer share"] = _curve(
            plt, curve, out_dir / "gap_curve.png", marked=[("MAI (report settings)", *mine)]
        )
    return out


def _curve(
    plt: Any,
    curve: Sequence[dict[str, Any]],
    path: Path,
    marked: Sequence[tuple[str, float | None, float | None]] = (),
) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ys = [c["gap_recovered"] if c["gap_recovered"] is not None else c["accuracy"] for c in curve]
    label = "gap recovered" if curve[0]["gap_recovered"] is not None else "accuracy"
    ax.scatter([c["transfer_share"] for c in curve], ys, s=10, color=_OTHER, alpha=0.5,
               label="gate settings")  # fmt: skip
    front = [(c["transfer_share"], y) for c, y in zip(curve, ys) if c.get("pareto")]
    front.sort()
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color=_MAI, ms=3, lw=1.2,
                label="Pareto front")  # fmt: skip
    for name, x, y in marked:
        if x is not None and y is not None:
            ax.scatter([x], [y], s=70, marker="*", color=_LARGE, zorder=4, label=name)
    ax.set_xlabel("share of runs needing the transfer step")
    ax.set_ylabel(label + (" (small = 0, strong = 1)" if label == "gap recovered" else ""))
    ax.set_title("Cost-quality curve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    saved = _save(fig, path)
    plt.close(fig)
    return saved


def plot_calibration(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """The calibration curve with the chosen setting marked. Returns ``{title: path}``."""
    curve = result.get("curve") or []
    if not curve:
        return {}
    plt = _pyplot()
    pareto = set(result.get("pareto") or [])
    points = [{**c, "pareto": c["label"] in pareto} for c in curve]
    chosen = result.get("chosen")
    marked = []
    if chosen is not None:
        y = chosen["gap_recovered"] if curve[0]["gap_recovered"] is not None else chosen["accuracy"]
        marked.append(("chosen", chosen["transfer_share"], y))
    path = _curve(plt, points, out_dir / "calibration_curve.png", marked)
    return {"Calibration curve": path}
