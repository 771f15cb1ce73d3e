"""Steer a real backend's outputs with constrained choices, to force routes in demos and tests.

The engine still does all the work (prefill, decode, caching); only the set of strings it may
produce for a purpose is narrowed. With random-weight models this is how a demo shows every
route: e.g. force the two short answers apart to take the reasoning path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from mai_graph.backends.base import GenerationRequest, Purpose, VLMBackend
from mai_graph.backends.wrapper import WrapperBackend
from mai_graph.errors import ConfigError

__all__ = ["SteeredBackend"]

_PURPOSES: tuple[Purpose, ...] = ("short", "cot", "s2", "answer")


class SteeredBackend(WrapperBackend):
    """Wraps a backend and constrains outputs per request purpose.

    Args:
        inner: The backend that serves the requests.
        choices: ``{purpose: allowed outputs}``; purposes are ``short``, ``cot``, ``s2``,
            ``answer``. Unlisted purposes pass through unchanged.
    """

    def __init__(self, inner: VLMBackend, choices: Mapping[str, Sequence[str]]) -> None:
        unknown = sorted(set(choices) - set(_PURPOSES))
        if unknown:
            raise ConfigError(
                f"unknown purposes {unknown}; use {list(_PURPOSES)}",
                parameter="choices",
                value=unknown,
            )
        super().__init__(inner)
        self.choices = {k: tuple(v) for k, v in choices.items()}

    def before(self, request: GenerationRequest) -> GenerationRequest:
        """The request narrowed to the steered outputs, and generated.

        Never read off one step: a distribution would range over every allowed answer, not
        over the steered ones.
        """
        forced = self.choices.get(request.purpose)
        if forced is None:
            return request
        return dataclasses.replace(request, choices=forced, distribution=None)
