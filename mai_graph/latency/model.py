"""The latency model: what each route costs, from measured (or given) engine speeds.

The seed model of MAI's cost is ``T = N_S/T_S + N_L'/T_L``: the small model's reasoning tokens
over its decode speed plus the large model's short answer over its own. This module extends it
with what a real call also pays, each term fitted per engine from measured calls
(:func:`fit_engine`, fed by ``mai-graph profile``):

- a fixed cost per call (scheduling, sampling set-up, the first decode step);
- prefill of the *uncached* prompt tokens (prefix-cache hits cost about nothing), plus an
  attention term that grows with the context those tokens attend to;
- a fresh image (image processor and vision encoder), and a constrained-choice set-up;
- decode per generated token, plus a term per token per context token (each step reads the KV
  cache);
- client time per call outside the engine (prompt rendering, image loading).

A route is its calls on the critical path: the two verification calls run concurrently, so
mutual verification costs ``max(a, b) + overlap * min(a, b)``, where ``overlap`` is 0 for two
engines that never compete (separate GPUs) and 1 for engines that take turns (one shared CPU
core); the profile measures it. Reasoning, S2, sparsification and the transfer answer follow in
sequence. A whole run adds the graph's own overhead (:attr:`LatencyModel.run_s`,
:attr:`LatencyModel.node_s`).

From the routes follow MAI's expected latency at an agreement rate, its speedup over the large
model reasoning by itself (``large_cot``) and the break-even agreement rate. Everything this
module returns is *modelled*; ``mai-graph profile`` prints it labelled so, next to what it
measured.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mai_graph import flow
from mai_graph.errors import ConfigError
from mai_graph.workload import CallTokens, Workload

__all__ = [
    "CallSample",
    "CallTokens",
    "EngineProfile",
    "LatencyModel",
    "MODEL_ROUTES",
    "Workload",
    "describe",
    "fit_engine",
    "fit_overlap",
    "parse_what_if",
]

Role = flow.Role

MODEL_ROUTES = tuple(flow.ENDINGS)
"""Routes the model predicts: every route that ends on model calls (:data:`mai_graph.flow.
ENDINGS`; ``human`` waits for a person and is not modelled)."""


FEATURES = (
    "call_s",
    "prefill_token_s",
    "prefill_ktoken2_s",
    "image_s",
    "choice_s",
    "decode_token_s",
    "decode_ktoken2_s",
)
"""The fitted coefficients, in the order of :meth:`~mai_graph.workload.CallTokens.features`."""


@dataclass(frozen=True)
class CallSample:
    """A measured call: its shape, the engine's latency and the wall time around the call."""

    shape: CallTokens
    latency_s: float
    """Time inside the engine (what the backend reports as the call's latency)."""
    wall_s: float | None = None
    """Time the caller waited for the call (adds prompt rendering, image loading)."""
    group: str | None = None
    """Repeats of one design point share a group (their token counts may differ slightly)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EngineProfile(_Model):
    """One engine's costs (seconds). ``decode_tok_s`` and ``prefill_tok_s`` give speeds."""

    name: str
    """Model name (as in metrics)."""
    call_s: Annotated[float, Field(ge=0)] = 0.0
    """Fixed engine time per call: scheduling, sampling set-up, the first decode step."""
    prefill_token_s: Annotated[float, Field(ge=0)] = 0.0
    """Per uncached prompt token."""
    prefill_ktoken2_s: Annotated[float, Field(ge=0)] = 0.0
    """Per uncached token per thousand context tokens it attends to (attention in prefill)."""
    image_s: Annotated[float, Field(ge=0)] = 0.0
    """Per fresh image: image processor and vision encoder beyond its tokens' prefill."""
    choice_s: Annotated[float, Field(ge=0)] = 0.0
    """Per call with constrained choices (structured-output set-up)."""
    decode_token_s: Annotated[float, Field(gt=0)]
    """Per generated token after the first."""
    decode_ktoken2_s: Annotated[float, Field(ge=0)] = 0.0
    """Per generated token per thousand context tokens (each step reads the KV cache)."""
    client_s: Annotated[float, Field(ge=0)] = 0.0
    """Per call outside the engine (prompt rendering, image loading, event-loop hops)."""
    fit: dict[str, Any] = {}
    """How the fit went: samples, median and worst relative error (empty for what-if)."""

    @property
    def decode_tok_s(self) -> float:
        """Decode speed in tokens per second at short context."""
        return 1.0 / self.decode_token_s

    @property
    def prefill_tok_s(self) -> float | None:
        """Prefill speed in tokens per second at short context (None if not modelled)."""
        return 1.0 / self.prefill_token_s if self.prefill_token_s > 0 else None

    def engine_time(self, call: CallTokens) -> float:
        """Modelled seconds inside the engine for one call.

        >>> p = EngineProfile(name="m", call_s=0.01, decode_token_s=0.02)
        >>> round(p.engine_time(CallTokens("small", "x", uncached=10, generated=3)), 6)
        0.05
        """
        coefficients = (getattr(self, f) for f in FEATURES)
        return sum(c * x for c, x in zip(coefficients, call.features()))

    def ttft(self, prompt_tokens: int, *, image: bool = True) -> float:
        """Modelled time to the first token of a fresh prompt (engine time)."""
        return self.engine_time(CallTokens("small", "ttft", prompt_tokens, image=image))


def _is_latency_model(file: Path) -> bool:
    """Whether a file is a latency model :meth:`LatencyModel.save` wrote (it may be replaced)."""
    try:
        return LatencyModel.load(file) is not None
    except Exception:  # any unreadable or foreign file is the user's: not ours to overwrite
        return False


class LatencyModel(_Model):
    """Per-route latency of a model pair, and MAI's expected latency, speedup and break-even.

    Built by ``mai-graph profile`` (``source="measured"``: fitted on this machine's engines) or
    from given speeds (:meth:`what_if`, ``source="what-if"``). Saved as JSON
    (:meth:`save` / :meth:`load`); ``mai-graph eval --latency-model FILE`` prints its per-route
    predictions next to the measured latencies.

    Example:
        >>> m = LatencyModel.what_if("small=61.8,large=47.3")  # decode tokens/s
        >>> w = Workload(cot_tokens=300, large_cot_tokens=200)
        >>> round(m.predict_route("large_cot", w), 2), round(m.predict_route("transfer", w), 2)
        (4.27, 4.97)
        >>> round(m.break_even(workload=w), 3), round(m.speedup(0.8, workload=w), 2)
        (0.142, 4.15)
    """

    version: int = 1
    source: Literal["measured", "what-if"] = "measured"
    """``measured``: fitted on profiled engines; ``what-if``: built from given speeds."""
    created: str = Field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )
    small: EngineProfile
    large: EngineProfile
    overlap: Annotated[float, Field(ge=0, le=2)] = 0.0
    """Mutual verification costs ``max(a, b) + overlap * min(a, b)`` (0: fully concurrent)."""
    sparsify_s: Annotated[float, Field(ge=0)] = 0.0
    """Scoring and selecting the transferred tokens."""
    run_s: Annotated[float, Field(ge=0)] = 0.0
    """Per graph run outside model calls: input validation, image handling, the first node."""
    node_s: Annotated[float, Field(ge=0)] = 0.0
    """Per further graph node."""
    workload: Workload = Workload()
    """The token counts predictions use unless given others (measured on the profiled pair)."""
    notes: dict[str, Any] = {}
    """Measurement details (engine names, rounds, what was measured)."""

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def what_if(
        cls, spec: str | Mapping[str, float], workload: Workload | None = None
    ) -> LatencyModel:
        """A model of a deployment from given engine speeds (see :func:`parse_what_if`)."""
        values = parse_what_if(spec) if isinstance(spec, str) else dict(spec)
        _check_what_if_keys(values)

        def engine(role: str) -> EngineProfile:
            prefill = values.get(f"{role}_prefill")
            return EngineProfile(
                name=f"{role} (what-if)",
                decode_token_s=1.0 / values[role],
                prefill_token_s=1.0 / prefill if prefill else 0.0,
                # Without a given fixed cost, a call pays one decode step before its first
                # token, so N generated tokens cost N / speed (the seed model's term).
                call_s=values.get(f"{role}_call_ms", 1000.0 / values[role]) / 1000.0,
            )

        for role in ("small", "large"):
            if role not in values:
                raise ConfigError(
                    f"what-if needs the {role} model's decode speed",
                    parameter="--what-if",
                    value=spec,
                    fix="give e.g. small=60,large=45 (decode tokens per second)",
                )
        return cls(
            source="what-if",
            small=engine("small"),
            large=engine("large"),
            overlap=values.get("overlap", 0.0),
            workload=workload or Workload(),
            notes={"what_if": values},
        )

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON; returns the path."""
        from mai_graph.files import output_file

        file = output_file(path, flag="--out", what="latency model", owns=_is_latency_model)
        file.write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")
        return file

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        """Read a model written by :meth:`save` (``mai-graph profile --out``).

        Raises:
            ConfigError: Missing file, not JSON, or not a latency model.
        """
        from mai_graph.files import read_text
        from mai_graph.jsonin import parse_json

        file = Path(path).expanduser()
        fix = "write one with `mai-graph profile --out FILE`"
        if not file.exists() and not file.is_symlink():
            raise ConfigError(f"latency model not found: {file}", parameter="latency_model",
                              value=str(file), fix=fix)  # fmt: skip
        text = read_text(file, flag="latency_model", what="latency model")
        try:
            data = parse_json(text, parameter="latency_model", what=f"{file}", fix=fix)
        except ConfigError as exc:
            raise ConfigError(
                f"{file} is not a latency model ({exc.message})",
                parameter="latency_model",
                value=str(file),
                fix=fix,
            ) from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "file"
            raise ConfigError(
                f"{file} is not a latency model ({where}: {first['msg']})",
                parameter="latency_model",
                value=str(file),
                fix="write one with `mai-graph profile --out FILE`",
            ) from None

    # -- predicting --------------------------------------------------------------------------

    def engine(self, role: str) -> EngineProfile:
        """The profile of ``small`` or ``large``."""
        if role not in ("small", "large"):
            raise ConfigError(f"role must be small or large, got {role!r}", parameter="role")
        return self.small if role == "small" else self.large

    def call_time(self, call: CallTokens, *, wall: bool = False) -> float:
        """Modelled seconds of one call (``wall`` adds the client time around it)."""
        engine = self.engine(call.role)
        return engine.engine_time(call) + (engine.client_s if wall else 0.0)

    def path_time(self, calls: Iterable[CallTokens], *, wall: bool = False) -> float:
        """Modelled critical path of calls: verification calls overlap, the rest add up.

        ``wall`` adds the client time per call (not the graph's overhead per run).
        """
        verify: list[float] = []
        rest = 0.0
        for call in calls:
            seconds = self.call_time(call, wall=wall)
            if call.node == "verify":
                verify.append(seconds)
            else:
                rest += seconds
                if call.node == "answer":
                    rest += self.sparsify_s
        return self.verification(verify) + rest

    def verification(self, seconds: Sequence[float]) -> float:
        """Concurrent verification calls: ``max + overlap * (the others)``.

        >>> m = LatencyModel.what_if("small=100,large=50,overlap=0.5")
        >>> m.verification([0.1, 0.3])
        0.35
        """
        if not seconds:
            return 0.0
        return max(seconds) + self.overlap * (sum(seconds) - max(seconds))

    def predict_route(
        self, route: str, workload: Workload | None = None, *, wall: bool = True
    ) -> float:
        """Modelled seconds of one run that takes ``route``.

        Args:
            route: One of :data:`MODEL_ROUTES`.
            workload: Token counts (default: the model's own).
            wall: Whole-run time as the caller sees it (client time per call and the graph's
                overhead); False gives the critical path of model time only, as the evaluation
                report measures it.
        """
        calls = (workload or self.workload).calls(route)
        seconds = self.path_time(calls, wall=wall)
        if wall:
            seconds += self.run_s + self.node_s * (len(flow.nodes(route)) - 1)
        return seconds

    def predict_routes(
        self, workload: Workload | None = None, *, wall: bool = True
    ) -> dict[str, float]:
        """:meth:`predict_route` for every route."""
        return {r: self.predict_route(r, workload, wall=wall) for r in MODEL_ROUTES}

    def expected_mai(
        self,
        agree_rate: float,
        s2_exit_rate: float = 0.0,
        workload: Workload | None = None,
        *,
        wall: bool = True,
    ) -> float:
        """Expected seconds of a MAI run.

        Args:
            agree_rate: Share of runs whose two short answers agree (route ``agree``).
            s2_exit_rate: Share of the *disagreeing* runs settled by the S2 answer
                (``extract_agree``); the rest transfer.
            workload: Token counts (default: the model's own).
            wall: As in :meth:`predict_route`.
        """
        _check_rate(agree_rate, "agree_rate")
        _check_rate(s2_exit_rate, "s2_exit_rate")
        t = {r: self.predict_route(r, workload, wall=wall) for r in _MAI}
        tail = s2_exit_rate * t["extract_agree"] + (1 - s2_exit_rate) * t["transfer"]
        return agree_rate * t["agree"] + (1 - agree_rate) * tail

    def speedup(
        self, agree_rate: float, s2_exit_rate: float = 0.0, workload: Workload | None = None
    ) -> float:
        """Modelled ``large_cot`` latency over MAI's expected latency."""
        mai = self.expected_mai(agree_rate, s2_exit_rate, workload)
        return self.predict_route("large_cot", workload) / mai

    def break_even(
        self, s2_exit_rate: float = 0.0, workload: Workload | None = None
    ) -> float | None:
        """The least agreement rate at which MAI is no slower than ``large_cot`` on average.

        The reference is the large model reasoning by itself (``large_cot``), the paper's
        baseline; MAI always runs the large model's short answer, so it is never faster than
        ``large`` answering short. 0 means MAI is faster at any agreement rate; None that it is
        slower even when every run agrees.
        """
        _check_rate(s2_exit_rate, "s2_exit_rate")
        t = {r: self.predict_route(r, workload) for r in (*_MAI, "large_cot")}
        tail = s2_exit_rate * t["extract_agree"] + (1 - s2_exit_rate) * t["transfer"]
        if t["agree"] > t["large_cot"]:
            return None
        if tail <= t["large_cot"]:
            return 0.0
        return (tail - t["large_cot"]) / (tail - t["agree"])

    def seed_estimate(self, workload: Workload | None = None) -> float:
        """The seed model ``N_S/T_S + N_L'/T_L``: decode time of the transfer route only.

        ``N_S`` is the reasoning, ``N_L'`` the large model's short answer; it leaves out
        prefill, per-call costs, verification and overheads.
        """
        w = workload or self.workload
        return w.cot_tokens / self.small.decode_tok_s + w.short_tokens / self.large.decode_tok_s

    def predict_calls(self, calls: Iterable[Any]) -> float:
        """Modelled critical path of recorded calls (``CallRecord``-like objects).

        Uncached tokens are ``prompt_tokens - cached_tokens``. A role's first call on the path
        is taken to read a fresh image when the model's workload has images and no more than
        the shared system prompt (``workload.prompt_cached``) came from the cache (an
        evaluation that runs several policies over the same samples finds their images
        cached). Short calls are constrained when the workload's are.
        """
        shapes = []
        seen: set[str] = set()
        for c in calls:
            cached = c.cached_tokens or 0
            first = c.role not in seen
            fresh = first and self.workload.image and cached <= self.workload.prompt_cached
            seen.add(c.role)
            shapes.append(
                CallTokens(
                    c.role,
                    c.node,
                    max(c.prompt_tokens - cached, 0),
                    cached,
                    c.generated_tokens,
                    fresh,
                    self.workload.constrained and c.node != "reason",
                )
            )
        return self.path_time(shapes)

    def report_predictor(self, label: str = "latency model") -> Callable[[str, Sequence[Any]], Any]:
        """A ``latency_model`` for :func:`~mai_graph.eval.report.build_report`.

        It predicts each route's mean critical-path latency from the recorded token counts of
        its runs (the report's measured latency is that same critical path).
        """

        def predict(route: str, outcomes: Sequence[Any]) -> float | None:
            paths = [o.path for o in outcomes if getattr(o, "path", None)]
            if route not in MODEL_ROUTES or not paths:
                return None
            return statistics.fmean(self.predict_calls(p) for p in paths)

        predict.__name__ = f"{label} ({self.source}, modelled)"
        return predict


_MAI = ("agree", "extract_agree", "transfer")


def _check_rate(value: float, name: str) -> None:
    if not 0 <= value <= 1:
        raise ConfigError(f"{name} must be in [0, 1], got {value}", parameter=name, value=value)


# -- what-if -----------------------------------------------------------------------------------

MIN_SPEED = 1e-3
"""Slowest what-if speed, tokens/s (its inverse, seconds per token, must stay finite)."""

MAX_WHAT_IF = 1e9
"""Largest what-if speed (tokens/s) or fixed time per call (ms)."""

_WHAT_IF_KEYS = {
    "small": "small model decode speed, tokens/s",
    "large": "large model decode speed, tokens/s",
    "small_prefill": "small model prefill speed, tokens/s (default: prefill not modelled)",
    "large_prefill": "large model prefill speed, tokens/s (default: prefill not modelled)",
    "small_call_ms": "small model fixed time per call, ms (default: one decode step)",
    "large_call_ms": "large model fixed time per call, ms (default: one decode step)",
    "overlap": "verification contention, 0 (separate devices, default) to 1 (taking turns)",
}


def parse_what_if(spec: str) -> dict[str, float]:
    """Parse ``small=61.8,large=47.3[,small_prefill=...,overlap=...]``.

    >>> parse_what_if("small=61.8, large=47.3")
    {'small': 61.8, 'large': 47.3}
    """
    values: dict[str, float] = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key = key.strip()
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if not sep or not math.isfinite(number):
            raise ConfigError(
                f"what-if items are KEY=NUMBER, got {item!r}",
                parameter="--what-if",
                value=spec,
                fix="e.g. --what-if small=60,large=45",
            )
        values[key] = number
    _check_what_if_keys(values)
    return values


def _check_what_if_keys(values: Mapping[str, float]) -> None:
    unknown = sorted(set(values) - set(_WHAT_IF_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown what-if keys {unknown}; known: {sorted(_WHAT_IF_KEYS)}",
            parameter="--what-if",
            value=unknown,
            fix="; ".join(f"{k}: {v}" for k, v in _WHAT_IF_KEYS.items()),
        )
    for key, value in values.items():
        if key == "overlap":
            low, high = 0.0, 2.0
        elif key.endswith("_call_ms"):
            low, high = 0.0, MAX_WHAT_IF
        else:  # a speed: its inverse is a time, so not below MIN_SPEED (prefill 0: unmodelled)
            low, high = (0.0 if key.endswith("_prefill") and value == 0 else MIN_SPEED), MAX_WHAT_IF
        bad = isinstance(value, bool) or not isinstance(value, int | float)
        if bad or not (math.isfinite(value) and low <= value <= high):
            raise ConfigError(
                f"what-if {key} must be "
                f"{'in [0, 2]' if key == 'overlap' else f'positive, {low:g} to {high:g}'}, "
                f"got {value}",
                parameter="--what-if",
                value=value,
                fix=f"{key}: {_WHAT_IF_KEYS[key]}",
            )


# -- fitting -----------------------------------------------------------------------------------


def _nnls(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float]:
    """Least squares with every coefficient >= 0 (``scipy.optimize.nnls``, exact).

    Raises:
        ConfigError: SciPy is not installed.
    """
    try:
        import numpy as np
        from scipy.optimize import nnls
    except ImportError as exc:
        raise ConfigError(
            "fitting the latency model needs SciPy",
            parameter="scipy",
            value=None,
            fix='pip install "mai-graph[eval]" (or the vllm / cpu / transformers extra), which '
            "brings scipy",
        ) from exc
    a = np.asarray(rows, dtype=float)
    # Columns scaled to unit norm keep the problem well conditioned (an all-zero column, a
    # feature no call varies, stays at 0).
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(a / scale, np.asarray(ys, dtype=float))
    return [float(c) for c in coef / scale]


def fit_engine(
    name: str, samples: Sequence[CallSample], *, min_decode_s: float = 1e-6
) -> EngineProfile:
    """Fit one engine's costs to measured calls (relative least squares, coefficients >= 0).

    Calls of the same shape are reduced to their median first (robust to a noisy machine);
    the fit then minimizes the *relative* error, so short calls weigh as much as long ones.
    A feature that no call varies (e.g. no call had an image) gets 0.

    Args:
        name: The engine's model name.
        samples: Measured calls of this engine (see ``mai-graph profile``).
        min_decode_s: Floor of the per-token decode cost (it must be positive).

    Raises:
        ConfigError: Fewer than three distinct call shapes, or no call decoding more than one
            token (decode speed cannot be told apart from the fixed cost); or SciPy, which
            solves the fit, is not installed.
    """
    groups: dict[Any, list[CallSample]] = {}
    for s in samples:
        groups.setdefault(s.group or s.shape, []).append(s)
    shapes = [_median_shape([s.shape for s in g]) for g in groups.values()]
    if len(groups) < 3 or not any(shape.generated > 1 for shape in shapes):
        raise ConfigError(
            f"fitting {name} needs calls of at least three shapes, some decoding more than one "
            f"token (got {len(groups)} shapes)",
            parameter="samples",
            value=len(samples),
            fix="profile with several prompt and output lengths",
        )
    ys = [statistics.median(s.latency_s for s in g) for g in groups.values()]
    rows = [[f / y for f in k.features()] for k, y in zip(shapes, ys)]
    coef = _nnls(rows, [1.0] * len(rows))
    values = dict(zip(FEATURES, coef))
    values["decode_token_s"] = max(values["decode_token_s"], min_decode_s)
    profile = EngineProfile.model_validate({"name": name, **values})
    errors = [abs(profile.engine_time(k) - y) / y for k, y in zip(shapes, ys)]
    walls = [s.wall_s - s.latency_s for s in samples if s.wall_s is not None]
    profile.client_s = max(statistics.median(walls), 0.0) if walls else 0.0
    profile.fit = {
        "samples": len(samples),
        "shapes": len(shapes),
        "median_rel_error": statistics.median(errors),
        "max_rel_error": max(errors),
    }
    return profile


def _median_shape(shapes: Sequence[CallTokens]) -> CallTokens:
    first = shapes[0]

    def med(attr: str) -> int:
        return round(statistics.median(getattr(s, attr) for s in shapes))

    return CallTokens(
        first.role,
        first.node,
        med("uncached"),
        med("cached"),
        med("generated"),
        first.image,
        first.constrained,
    )


def fit_overlap(
    model: LatencyModel, rounds: Sequence[tuple[CallTokens, CallTokens, float]]
) -> float:
    """The verification contention that explains concurrent pairs of calls.

    Each round is (small call, large call, the slower one's measured latency when both ran
    at once). Returns the median of ``(measured - max(a, b)) / min(a, b)`` over rounds, with
    ``a``, ``b`` the modelled solo times, clipped to [0, 2].

    Raises:
        ConfigError: No rounds.
    """
    if not rounds:
        raise ConfigError("no concurrent rounds to fit the overlap", parameter="rounds")
    ratios = []
    for small, large, measured in rounds:
        a, b = model.call_time(small), model.call_time(large)
        ratios.append((measured - max(a, b)) / max(min(a, b), 1e-9))
    return min(max(statistics.median(ratios), 0.0), 2.0)


def describe(model: LatencyModel) -> dict[str, Any]:
    """The fitted speeds in plain units (tokens/s, ms) for printing."""
    out: dict[str, Any] = {}
    for role in ("small", "large"):
        e = model.engine(role)
        out[role] = {
            "decode_tok_s": e.decode_tok_s,
            "prefill_tok_s": e.prefill_tok_s,
            "call_ms": 1000 * e.call_s,
            "image_ms": 1000 * e.image_s,
            "choice_ms": 1000 * e.choice_s,
            "client_ms": 1000 * e.client_s,
            "ttft_ms": 1000 * e.ttft(model.workload.prompt_tokens, image=model.workload.image),
        }
    return out
