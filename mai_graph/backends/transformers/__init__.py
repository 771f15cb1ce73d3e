"""Hugging Face transformers backend: CPU development, KV reuse across turns, attention access.

:class:`TransformersBackend` runs one request at a time in a worker thread with an explicit
decode loop, so it can:

- reuse KV caches: every prompt (and prompt + generated tokens) leaves a cache entry keyed by
  its token ids; a later prompt that extends one (the S2 turn extends the CoT conversation, the
  transfer prompt shares the verify prefix) only prefills the rest, and reports the reused
  length as cached tokens;
- honor ``min_tokens``, stop strings, seeds, logprobs and constrained ``choices`` exactly;
- stop at the next token when the awaiting task is cancelled;
- return attention weights onto spliced reasoning tokens (the ``attention`` scorer).

Vision-language models whose processor expands an image placeholder into grid tokens and whose
model takes 3-D (m-RoPE) positions, the Qwen2/2.5/3-VL families, are supported.

Modules: ``backend`` (the adapter: lifecycle, threads, cancellation), ``loading`` (model and
processor from a checkpoint), ``inputs`` (a rendered prompt as model inputs), ``kv_cache`` (the
prefix-reuse store), ``decode`` (the decode loop, choice constraint and streaming
detokenizer), ``attention`` (the attention scoring pass).
Needs the ``transformers`` extra; importing this package without it raises ``ImportError``.
"""

from __future__ import annotations

from mai_graph.backends.extras import require_extra

__all__ = ["TransformersBackend"]

# Only looks torch and transformers up (importlib.util.find_spec); nothing heavy is imported.
require_extra("transformers", ("torch", "transformers"), "transformers")

from mai_graph.backends.transformers.backend import TransformersBackend  # noqa: E402
