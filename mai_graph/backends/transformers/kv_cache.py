"""KV caches kept by the token ids they hold, so a prompt that extends one prefills only the rest.

The S2 turn extends the CoT conversation (prompt + generated ids) and the transfer prompt shares
the verify prompt's prefix: both find their prefix here and start from a copy of its cache.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from mai_graph.backends.render import common_prefix
from mai_graph.errors import check_int

__all__ = ["KVCacheStore", "cache_key", "empty_cache"]


def cache_key(ids: Sequence[int], config: Any, media: Sequence[str] = ()) -> tuple[int, ...]:
    """The ids a cache is stored under: media tokens stand for the media they hold.

    Every image or video token id is replaced by one negative id derived from the prompt's
    media hashes (no token id is negative), so prompts with other pictures never share the
    cached keys and values of their picture tokens.

    >>> class C: image_token_id, video_token_id = 9, 8
    >>> a, b = cache_key([1, 9, 9, 2], C(), ["aa"]), cache_key([1, 9, 9, 2], C(), ["bb"])
    >>> a[0], a[1] < 0, common_prefix(a, b)
    (1, True, 1)
    """
    if not media:
        return tuple(ids)
    import hashlib

    tag = -1 - int(hashlib.sha256("|".join(media).encode()).hexdigest()[:15], 16)
    tokens = {config.image_token_id, getattr(config, "video_token_id", None)}
    return tuple(tag if t in tokens else t for t in ids)


def empty_cache(model: Any) -> Any:
    """A new, empty transformers ``DynamicCache`` for ``model``."""
    from transformers.cache_utils import DynamicCache

    return DynamicCache(config=model.config)


class KVCacheStore:
    """The most recently used KV caches, keyed by the token ids each one holds.

    Entries are private copies: a cache handed to :meth:`store` or returned by :meth:`lookup`
    may be extended by the caller without changing what is stored.

    Args:
        capacity: How many caches to keep (least recently used dropped first); 0 keeps none.
    """

    def __init__(self, capacity: int) -> None:
        check_int(
            capacity,
            "cache_entries",
            minimum=0,
            fix="pass 0 to turn prefix reuse off, or how many caches to keep",
        )
        self.capacity = capacity
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: Sequence[int], *, min_prefix: int = 1) -> tuple[int, Any]:
        """The cache sharing the longest prefix with ``ids``, copied and cropped to that prefix.

        At least the last id of ``ids`` is always left to prefill (the model must produce the
        next token's logits).

        Args:
            ids: The token ids of the prompt about to be run.
            min_prefix: Shorter matches do not count (e.g. a match must cover every image
                token: images enter the cache only in one piece).

        Returns:
            ``(reused, cache)``: how many leading ids the cache covers and the cache, or
            ``(0, None)`` when no entry shares at least ``min_prefix`` ids.
        """
        head = ids[: len(ids) - 1]
        best_len, best_key = 0, None
        for key in self._entries:
            n = common_prefix(key, head)
            if n > best_len:
                best_len, best_key = n, key
        if best_key is None or best_len < max(min_prefix, 1):
            return 0, None
        self._entries.move_to_end(best_key)
        cache = copy.deepcopy(self._entries[best_key])
        surplus = cache.get_seq_length() - best_len
        if surplus > 0:
            cache.crop(-surplus)
        return best_len, cache

    def store(self, ids: Sequence[int], cache: Any) -> None:
        """Keep a copy of ``cache``, which holds exactly the keys and values of ``ids``."""
        if self.capacity == 0:
            return
        key = tuple(ids)
        self._entries[key] = copy.deepcopy(cache)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
