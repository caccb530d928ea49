"""One batched forward of a HF causal LM over sequences with different cache lengths and
different numbers of query tokens.

Layout of row i (cache length L_i, q_i query tokens, P = max L, Q = max q):

    keys:    [pad]*(P - L_i) [cached]*L_i | [query]*q_i [pad]*(Q - q_i)
    queries:                               [query]*q_i [pad]*(Q - q_i)

Past is left-padded so it ends at column P for every row; queries are right-padded so the
real ones start at column P. Position ids are given explicitly (L_i + j), so padding never
shifts rotary positions. Right-padded query slots see only their own row's real keys (the
2D mask hides pad columns, causality hides later ones); their outputs are discarded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch

from simctl.live.torch_engine.kv_cache import KVBuffer, build_padded_cache, read_new_entries


def output_head(model: torch.nn.Module) -> Any:
    """A HF causal LM's LM head (`get_output_embeddings()`). Any: torch types every
    attribute of an nn.Module as Tensor | Module, which this call is neither."""
    return cast(Any, model).get_output_embeddings()


@torch.inference_mode()
def ragged_forward(
    model: torch.nn.Module,
    buffers: Sequence[KVBuffer],
    queries: Sequence[Sequence[int]],
    logit_rows: Sequence[Sequence[int]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `queries[i]` on top of `buffers[i]` for all i in one forward.

    Returns (logits, new_kv): logits [sum(len(r) for r in logit_rows), vocab] for the query
    indices listed in `logit_rows[i]`, row-major by request; new_kv
    [layers, 2, batch, heads, Q, dim] holding the query tokens' keys/values, of which the caller
    appends the prefix it accepts (that is the whole rollback mechanism). Buffers are not
    modified here.

    The LM head runs only on the requested rows: with long prompts the full [B, Q, vocab]
    logits would dominate memory for nothing.
    """
    batch = len(queries)
    if not batch == len(buffers) == len(logit_rows):
        raise ValueError("buffers, queries and logit_rows must have equal length")
    if any(len(q) == 0 for q in queries):
        raise ValueError("every row needs at least one query token")
    device = next(model.parameters()).device
    cache_lens = [len(b) for b in buffers]
    q_lens = [len(q) for q in queries]
    past, width = max(cache_lens), max(q_lens)

    input_ids = torch.zeros((batch, width), dtype=torch.int64)
    attention_mask = torch.zeros((batch, past + width), dtype=torch.int64)
    position_ids = torch.zeros((batch, width), dtype=torch.int64)
    for i, (q, cache_len) in enumerate(zip(queries, cache_lens, strict=True)):
        input_ids[i, : len(q)] = torch.as_tensor(q, dtype=torch.int64)
        attention_mask[i, past - cache_len : past + len(q)] = 1
        position_ids[i] = torch.arange(cache_len, cache_len + width)

    cache, _ = build_padded_cache(list(buffers), past)
    base = cast(Any, model).base_model
    out = base(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        past_key_values=cache,
        use_cache=True,
    )
    hidden = out.last_hidden_state
    row_idx = [i for i, rows in enumerate(logit_rows) for _ in rows]
    col_idx = [j for rows in logit_rows for j in rows]
    for i, j in zip(row_idx, col_idx, strict=True):
        if not 0 <= j < q_lens[i]:
            raise ValueError(f"logit row {j} out of range for request {i} with {q_lens[i]} queries")
    rows = torch.as_tensor(row_idx, dtype=torch.int64, device=device)
    cols = torch.as_tensor(col_idx, dtype=torch.int64, device=device)
    picked = hidden[rows, cols]
    logits = output_head(model)(picked)
    return logits, read_new_entries(cache, past)
