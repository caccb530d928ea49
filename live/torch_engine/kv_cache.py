"""Per-sequence KV storage that is stacked into a left-padded HF cache for each forward.

Design (the simplest one that stays correct with ragged, per-request query lengths and
per-request rollback): every sequence owns a growable buffer holding the keys/values of its
committed tokens for all layers. A forward stacks the buffers into one left-padded
`DynamicCache`; afterwards the engine appends only the entries of the query tokens it decided
to keep. Rolling back rejected draft tokens therefore costs nothing: they are simply never
appended. The price is one copy of every live sequence's KV per forward (the stacking), which
is fine for tests and moderate batches but is not a paged cache.

We never call `DynamicCache.crop` or other version-specific cache APIs (their semantics changed
across transformers releases); we only build caches via `update()` and read the tensors back.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers import DynamicCache


class KVBuffer:
    """Keys and values of one sequence's committed tokens, all layers in one tensor
    [layers, 2, kv_heads, capacity, head_dim], grown by doubling so appends are amortised O(1)."""

    def __init__(self) -> None:
        self._data: torch.Tensor | None = None
        self.length = 0

    def __len__(self) -> int:
        return self.length

    @property
    def data(self) -> torch.Tensor | None:
        """Backing storage; only the first `length` slots of dim 3 are meaningful."""
        return self._data

    def append(self, new: torch.Tensor) -> None:
        """Append entries `new` [layers, 2, kv_heads, n, head_dim] (copied)."""
        n = new.shape[3]
        if n == 0:
            return
        if self._data is None:
            cap = max(16, n)
            shape = (*new.shape[:3], cap, new.shape[4])
            self._data = torch.empty(shape, dtype=new.dtype, device=new.device)
        elif self.length + n > self._data.shape[3]:
            cap = max(2 * self._data.shape[3], self.length + n)
            grown = torch.empty(
                (*self._data.shape[:3], cap, self._data.shape[4]),
                dtype=self._data.dtype,
                device=self._data.device,
            )
            grown[:, :, :, : self.length] = self._data[:, :, :, : self.length]
            self._data = grown
        self._data[:, :, :, self.length : self.length + n] = new
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget entries past `length` (rollback); storage is kept for reuse."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a {self.length}-entry buffer to {length}")
        self.length = length

    def clone(self, length: int | None = None) -> KVBuffer:
        """Independent copy of the first `length` entries (default all)."""
        length = self.length if length is None else length
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot clone {length} entries of a {self.length}-entry buffer")
        out = KVBuffer()
        if self._data is not None and length > 0:
            out.append(self._data[:, :, :, :length])
        return out


def build_padded_cache(buffers: list[KVBuffer], past_len: int) -> tuple[DynamicCache, torch.Tensor | None]:
    """Stack `buffers` into a `DynamicCache` of length `past_len`, left-padded per row.

    Returns the cache and the stacked tensor [layers, 2, batch, heads, past_len, dim] (None when
    `past_len` is 0, in which case the cache is empty and the model initialises it itself).
    Left padding keeps every row's real keys contiguous and adjacent to its queries, so the HF
    2D-mask path handles it like ordinary batched generation.
    """
    cache = DynamicCache()
    if past_len == 0:
        return cache, None
    ref = next(b.data for b in buffers if b.length > 0 and b.data is not None)
    layers, two, heads, _, dim = ref.shape
    stacked = torch.zeros(
        (layers, two, len(buffers), heads, past_len, dim), dtype=ref.dtype, device=ref.device
    )
    for row, buf in enumerate(buffers):
        if buf.length > 0 and buf.data is not None:
            stacked[:, :, row, :, past_len - buf.length :] = buf.data[:, :, :, : buf.length]
    for layer in range(layers):
        cache.update(stacked[layer, 0], stacked[layer, 1], layer)
    return cache, stacked


def read_new_entries(cache: DynamicCache, start: int) -> torch.Tensor:
    """Keys/values from column `start` on, all layers, as [layers, 2, batch, heads, n, dim].

    Only the new (query) columns are copied, not the whole past. Handles both cache layouts:
    `cache.layers[i].keys` (transformers >= 4.56) and `cache.key_cache[i]` (older releases).
    """
    if hasattr(cache, "layers"):
        # Any: the layer classes of some transformers releases are typed without keys/values
        pairs = [(layer.keys, layer.values) for layer in cast(Any, cache).layers]
    else:  # pragma: no cover - older transformers
        old = cast(Any, cache)
        pairs = list(zip(old.key_cache, old.value_cache, strict=True))
    return torch.stack([torch.stack((k[:, :, start:], v[:, :, start:])) for k, v in pairs])
