"""What a question costs at per-model token prices (``eval --price small=IN,OUT[,CACHED]``).

Prices are per million tokens, per role: prompt tokens, generated tokens, and optionally prompt
tokens served from the prefix cache (priced like other prompt tokens unless given). A run's
cost sums the calls on its path (:attr:`~mai_graph.eval.replay.Outcome.path`); the report
gives each policy's mean cost per question and per 1,000 questions next to its accuracy and
latency. The prices are the caller's inputs, not measurements: the report says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mai_graph.errors import ConfigError
from mai_graph.eval.replay import Outcome

__all__ = ["MAX_PRICE", "Price", "parse_prices", "run_cost"]

ROLES = ("small", "large")

MAX_PRICE = 1_000_000.0
"""The largest price accepted, per million tokens (a currency unit per token). Real prices
are far below it; the bound keeps every cost the report sums (tokens of every call, per 1,000
questions) a finite number, so ``report.json`` stays valid JSON."""


@dataclass(frozen=True)
class Price:
    """One model's prices per million tokens."""

    prompt: float
    generated: float
    cached: float | None = None
    """Prompt tokens read from the prefix cache (None: the prompt price)."""

    def __post_init__(self) -> None:
        for name in ("prompt", "generated", "cached"):
            value = getattr(self, name)
            if value is None and name == "cached":
                continue
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or not 0 <= value <= MAX_PRICE:
                raise ConfigError(
                    f"price {name} must be a number from 0 to {MAX_PRICE:,.0f} per million "
                    f"tokens, got {value!r}",
                    parameter="--price",
                    value=value,
                    fix="give the model's price per million tokens, e.g. --price small=0.1,0.4",
                )

    def of(self, prompt: int, cached: int | None, generated: int) -> float:
        """Cost of one call (currency units)."""
        hit = min(max(cached or 0, 0), prompt)
        cached_price = self.prompt if self.cached is None else self.cached
        return ((prompt - hit) * self.prompt + hit * cached_price
                + generated * self.generated) / 1e6  # fmt: skip


def parse_prices(items: Iterable[str]) -> dict[str, Price]:
    """``["small=0.1,0.4", "large=0.5,2,0.05"]`` as prices by role.

    >>> parse_prices(["small=0.1,0.4", "large=0.5,2,0.05"])["large"]
    Price(prompt=0.5, generated=2.0, cached=0.05)

    Raises:
        ConfigError: An item is not ``ROLE=IN,OUT[,CACHED]`` with a known role and
            numbers from 0 to :data:`MAX_PRICE`, or a role is given twice.
    """
    out: dict[str, Price] = {}
    for item in items:
        role, sep, raw = str(item).partition("=")
        role = role.strip()
        fix = "e.g. --price small=0.1,0.4 --price large=0.5,2,0.05 (per million tokens)"
        if not sep or role not in ROLES:
            raise ConfigError(
                f"--price takes ROLE=IN,OUT[,CACHED] with ROLE small or large, got {item!r}",
                parameter="--price",
                value=item,
                fix=fix,
            )
        if role in out:
            raise ConfigError(f"--price {role} is given twice", parameter="--price",
                              value=item, fix="give each role once")  # fmt: skip
        try:
            numbers = [float(x) for x in raw.split(",")]
        except ValueError:
            numbers = []
        if len(numbers) not in (2, 3) or any(not 0 <= x <= MAX_PRICE for x in numbers):
            raise ConfigError(
                f"--price {role} needs two or three numbers from 0 to {MAX_PRICE:,.0f} (per "
                f"million tokens), got {raw!r}",
                parameter="--price",
                value=item,
                fix=fix,
            )
        out[role] = Price(*numbers)
    return out


def run_cost(out: Outcome, prices: Mapping[str, Price]) -> float | None:
    """Cost of one run's path; None when a role on it has no price."""
    total = 0.0
    for call in out.path:
        price = prices.get(call.role)
        if price is None:
            return None
        total += price.of(call.prompt_tokens, call.cached_tokens, call.generated_tokens)
    return total
