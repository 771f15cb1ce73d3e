"""The benchmarks' backend wrapper: :class:`~mai_graph.backends.recording.ForcedBackend`.

Lengths are forced on the engine (it decodes exactly that many tokens), and the answer text is
replaced after the engine produced it, so a route can be chosen while every timing stays real.
"""

from mai_graph.backends.recording import ForcedBackend as Forced

__all__ = ["Forced"]
