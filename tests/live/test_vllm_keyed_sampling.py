"""The vLLM plugin's sampling patches without vLLM (torch only): position-keyed samples and
their speculative acceptance (live/vllm_keyed_sampling.py), and the generator-state restore
that replaces vLLM's offset rewind on CPU (live/vllm_cpu/plugin.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from simctl.live.vllm_cpu.plugin import install_rewind_fix  # noqa: E402
from simctl.live.vllm_keyed_sampling import keyed_tokens, keyed_uniform, sample_rows  # noqa: E402


def test_vllm_keyed_uniform_is_a_pure_function_of_key_and_position() -> None:
    us = [keyed_uniform(7, p) for p in range(2000)]
    assert us == [keyed_uniform(7, p) for p in range(2000)]
    assert all(0.0 < u < 1.0 for u in us)
    assert keyed_uniform(7, 3) != keyed_uniform(8, 3)
    assert abs(sum(us) / len(us) - 0.5) < 0.03


def test_vllm_keyed_rows_follow_the_distribution_and_ignore_other_rows() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7]]))
    n = 4000
    toks = sample_rows(logits.expand(n, 3), list(range(n)), [5] * n, [1.0] * n)
    freq = [toks.count(t) / n for t in range(3)]
    assert freq == pytest.approx([0.1, 0.2, 0.7], abs=0.03)
    # a row's sample is the same alone or among other rows
    other = torch.randn(5, 3)
    mixed = torch.cat([other, logits])
    assert (
        sample_rows(mixed, [1] * 5 + [9], [0] * 5 + [4], [1.0] * 6)[-1]
        == sample_rows(logits, [9], [4], [1.0])[0]
    )


def test_vllm_keyed_speculation_emits_the_plain_tokens() -> None:
    """A draft is accepted iff it equals the keyed sample at its position; the first keyed
    sample that differs is emitted in its place: whatever was drafted, the emitted tokens are
    the plain decoding's samples at those positions."""
    torch.manual_seed(0)
    logits = torch.randn(5, 11) * 3
    key, first = 12345, 40
    plain = sample_rows(logits, [key] * 5, list(range(first, first + 5)), [1.0] * 5)
    marked = [(0, key, 1.0)]
    for drafts in ([], plain[:4], [*plain[:2], (plain[2] + 1) % 11, plain[3]], [(plain[0] + 1) % 11] * 4):
        rows = list(range(len(drafts) + 1))
        slot = (rows, [first + j for j in rows], drafts)
        out = keyed_tokens(logits, marked, [slot])[0]
        n_acc = next((j for j, d in enumerate(drafts) if d != plain[j]), len(drafts))
        assert out == plain[: n_acc + 1]


class _FakeRunner:
    """Just what the rewind fix touches: a discard mask, generators by batch index, a
    `_sample` that draws from every generator, and upstream's offset rewind."""

    def __init__(self, gens: dict[int, Any], discard: list[bool]) -> None:
        self.input_batch = SimpleNamespace(generators=gens, num_reqs=len(discard))
        self.discard_request_mask = SimpleNamespace(np=discard)

    def _sample(self, logits: Any, spec: Any) -> None:
        for g in self.input_batch.generators.values():
            torch.rand(8, generator=g)

    def _bookkeeping_sync(self) -> None:
        for i, discarded in enumerate(self.discard_request_mask.np):
            gen = self.input_batch.generators.get(i)
            if discarded and gen is not None:
                gen.set_offset(gen.get_offset() - 4)  # raises on CPU generators


def test_vllm_rewind_fix_restores_discarded_cpu_generators() -> None:
    gens = {0: torch.Generator().manual_seed(1), 1: torch.Generator().manual_seed(2)}
    runner = _FakeRunner(gens, [True, False])
    with pytest.raises(RuntimeError, match="offset"):
        runner._sample(None, None)
        runner._bookkeeping_sync()
    install_rewind_fix(_FakeRunner)
    install_rewind_fix(_FakeRunner)  # idempotent
    gens = {0: torch.Generator().manual_seed(1), 1: torch.Generator().manual_seed(2)}
    runner = _FakeRunner(gens, [True, False])
    runner._sample(None, None)
    runner._bookkeeping_sync()
    # the discarded request's stream is as if nothing was drawn; the other one advanced
    assert torch.equal(
        torch.rand(3, generator=gens[0]), torch.rand(3, generator=torch.Generator().manual_seed(1))
    )
    fresh = torch.Generator().manual_seed(2)
    torch.rand(8, generator=fresh)
    assert torch.equal(torch.rand(3, generator=gens[1]), torch.rand(3, generator=fresh))
    assert set(runner.input_batch.generators) == {0, 1}
