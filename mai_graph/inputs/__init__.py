"""A run's inputs before any engine sees them: where images may come from, images, videos, limits.

- :mod:`~mai_graph.inputs.sources`: the image policy and one function from a source (path, URL,
  data URL, base64, bytes, PIL image) to an image reference; HTTP(S) images through
  :mod:`~mai_graph.inputs.fetch`, the SSRF-safe fetcher.
- :mod:`~mai_graph.inputs.images`: image references (path + pixel hash), decoding, the image
  store and the pixel cache.
- :mod:`~mai_graph.inputs.video`: video references and frame sampling.
- :mod:`~mai_graph.inputs.limits`: the limits every input meets before an engine (question
  size, image shape, counts per prompt, token budgets), and which backends take what.
"""
