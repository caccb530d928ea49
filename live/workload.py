"""What a live run generates: steps of requests (prompt tokens, budget, group), built from a
prompt file, the bundled math prompts, or a recorded/generated trace.

From a trace the run reproduces the trace's lengths: each request gets the trace's
prompt length (its token ids when the trace has them, else synthetic ids) and an engine
budget of exactly its `response_len` with stop tokens disabled, while policies still see
the trace's `max_tokens` (what they would have seen in production). It reproduces the
trace's speculation too: each request carries its row's `accept_<method>` rates
(live/trace_acceptance.py), which the engines verify drafts with instead of their own.

A trace from a production cluster is far too big for a CPU box (thousands of tokens per
response, hundreds of requests per step): `trace_scale` multiplies every length (prompt,
response, max_tokens and the acceptance buckets' width, at least 1 token each) and
`trace_requests` keeps the first N requests of each step, rounded up to whole prompt
groups (policies schedule groups). Both are recorded in the workload's provenance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simctl.live.live_options import WorkloadOptions
from simctl.live.trace_acceptance import MethodAcceptance, TraceAcceptance, token_weighted_rates
from simctl.traces.io import Trace, TraceError
from simctl.traces.schema import StepTiming, acceptance_methods, bucket_column
from simctl.traces.validate import load_valid_trace

BUNDLED_PROMPTS = "math_prompts.jsonl"


class WorkloadError(ValueError):
    """A prompt file or trace that cannot drive a run; one line."""


@dataclass(frozen=True)
class RequestSpec:
    prompt_id: int
    sample: int
    prompt: tuple[int, ...]
    max_tokens: int  # what the policy sees (RequestView.max_tokens)
    budget: int  # what the engine may generate: max_tokens, or the trace's response_len
    finish_reason: str | None = None  # forced by a trace replay (lengths reproduced)
    # a trace replay's per-method acceptance, which the engines verify drafts with
    acceptance: TraceAcceptance | None = None


@dataclass
class StepWork:
    step: int
    epoch: int
    requests: list[RequestSpec]


@dataclass
class Workload:
    steps: list[StepWork]
    group_size: int
    stop_on_eos: bool
    source: dict[str, Any] = field(default_factory=dict)
    timing: StepTiming = field(default_factory=StepTiming)
    oracle: bool = False  # lengths are known in advance (trace replay)
    # a trace replay's per-token acceptance by method, token-weighted over its requests: the
    # one rate per method an engine that verifies for a whole batch (vLLM) can inject
    trace_rates: dict[str, float] = field(default_factory=dict)

    @property
    def num_requests(self) -> int:
        return sum(len(s.requests) for s in self.steps)


@dataclass(frozen=True)
class Prompt:
    text: str
    answer: str | None = None


def read_prompts(path: Path | None) -> list[Prompt]:
    """JSONL with a `prompt` (or `question`) field and an optional `answer`; or plain text,
    one prompt per line. None = the bundled math word problems."""
    if path is None:
        text = resources.files("simctl.live.prompts").joinpath(BUNDLED_PROMPTS).read_text()
        where = BUNDLED_PROMPTS
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise WorkloadError(f"prompts file {path}: cannot read ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise WorkloadError(
                f"prompts file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        where = str(path)
    out: list[Prompt] = []
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"prompts file {where}: line {i}: bad JSON ({exc.msg})") from None
            except (ValueError, RecursionError):  # (an integer of thousands of digits, nesting)
                raise WorkloadError(f"prompts file {where}: line {i}: JSON this reader cannot hold") from None
            if not isinstance(obj, dict):
                raise WorkloadError(f"prompts file {where}: line {i}: needs a JSON object with a 'prompt'")
            body = obj.get("prompt") or obj.get("question")
            if not isinstance(body, str) or not body:
                raise WorkloadError(f"prompts file {where}: line {i}: needs a 'prompt' string")
            ans = obj.get("answer")
            out.append(Prompt(body, None if ans is None else str(ans)))
        else:
            out.append(Prompt(line))
    if not out:
        raise WorkloadError(f"prompts file {where}: no prompts")
    return out


def encode(tokenizer: Any | None, prompt: Prompt, vocab: int, index: int) -> tuple[int, ...]:
    """Chat-templated token ids; without a tokenizer (random models) deterministic synthetic
    ids of the text's length in characters / 4, so lengths still resemble the text's."""
    if tokenizer is None:
        n = max(4, len(prompt.text) // 4)
        rng = np.random.default_rng(index)
        return tuple(int(t) for t in rng.integers(3, vocab, size=n))
    msgs = [{"role": "user", "content": prompt.text}]
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
    else:
        ids = tokenizer(prompt.text)["input_ids"]
    return tuple(int(t) for t in ids)


def from_prompts(
    prompts: list[Prompt],
    tokenizer: Any | None,
    vocab: int,
    *,
    group_size: int,
    max_tokens: int,
    steps: int,
    prompts_per_step: int | None,
) -> Workload:
    """Steps take consecutive slices of the prompt list (wrapping: epochs), as an RL
    trainer's dataloader does; every prompt is sampled `group_size` times."""
    per_step = min(prompts_per_step or len(prompts), len(prompts))
    encoded = [encode(tokenizer, p, vocab, i) for i, p in enumerate(prompts)]
    work = []
    for s in range(steps):
        start = s * per_step
        reqs = []
        for j in range(per_step):
            pid = (start + j) % len(prompts)
            for k in range(group_size):
                reqs.append(RequestSpec(pid, k, encoded[pid], max_tokens, max_tokens))
        work.append(StepWork(step=s, epoch=start // len(prompts), requests=reqs))
    return Workload(work, group_size, stop_on_eos=True, source={"kind": "prompts", "prompts": len(prompts)})


def check_context(where: str, needs: np.ndarray, max_context: int | None, keys: Any = None) -> None:
    """Refuse, before any prompt is built, a request whose prompt and response cannot fit
    in a worker (the model's context or the engine's KV budget): it would never finish."""
    if max_context is None or not len(needs):
        return
    i = int(np.argmax(needs))
    if int(needs[i]) > max_context:
        which = f" ({keys[i]})" if keys is not None else ""
        raise WorkloadError(
            f"{where}: a request{which} needs {int(needs[i]):,} tokens of context; a worker holds "
            f"{max_context:,} (the model's context and --kv-budget-gib)"
        )


def scaled(n: int, scale: float) -> int:
    """A trace length on this machine: `n * scale`, rounded, at least 1 token.

    >>> scaled(2046, 0.01), scaled(3, 0.01), scaled(7, 1.0)
    (20, 1, 7)
    """
    return max(1, round(n * scale))


def first_requests(df: pd.DataFrame, rows: np.ndarray, limit: int | None) -> np.ndarray:
    """`rows` (one step's, in trace order) cut to the first `limit` requests, rounded up to
    whole prompt groups in order of first appearance (None: all of them)."""
    if limit is None or len(rows) <= limit:
        return rows
    pids = df["prompt_id"].to_numpy()[rows]
    keep: set[int] = set()
    count = 0
    for pid in pd.unique(pids):
        if count >= limit:
            break
        keep.add(int(pid))
        count += int((pids == pid).sum())
    return rows[np.isin(pids, list(keep))]


def acceptance_rows(trace: Trace, rows: np.ndarray, scale: float) -> list[TraceAcceptance]:
    """Each row's acceptance for every method the trace records (buckets where it has them;
    their width scaled with the lengths). A NaN leaves the method out for that row."""
    df = trace.df
    methods = acceptance_methods(list(df.columns))
    width = trace.meta.accept_bucket_tokens
    buckets = {}
    for m in methods:
        col = bucket_column(m)
        if col in trace.lists and width:
            buckets[m] = trace.token_arrays(col)
    means = {m: df[f"accept_{m}"].to_numpy(np.float64) for m in methods}
    plens = df["prompt_len"].to_numpy(np.int64)
    out = []
    for i in rows:
        plen = scaled(int(plens[i]), scale)
        per = []
        for m in methods:
            a = float(means[m][i])
            if not np.isfinite(a):
                continue
            if m in buckets:
                vals, off = buckets[m]
                b = tuple(float(x) for x in vals[off[i] : off[i + 1]])
                per.append(MethodAcceptance(m, plen, a, b, float(width or 0) * scale if b else None))
            else:
                per.append(MethodAcceptance(m, plen, a))
        out.append(TraceAcceptance(tuple(per)))
    return out


def trace_prompt_ids(trace: Trace, i: int, plen: int, vocab: int) -> tuple[int, ...]:
    """Row i's prompt of `plen` tokens: the trace's ids (a prefix when scaled down), else
    synthetic ids that are the same for the whole prompt group."""
    if "prompt_tokens" in trace.lists:
        vals, off = trace.token_arrays("prompt_tokens")
        ids = vals[off[i] : off[i + 1]][:plen]
        if len(ids) < plen:  # scaled up: repeat the prompt
            ids = np.resize(ids, plen)
        ids = np.where((ids >= 0) & (ids < vocab), ids, ids % vocab)
    else:
        pid = int(trace.df["prompt_id"].iat[i])
        # prompt ids are identities (a framework may use signed hashes): as unsigned seed words
        ids = np.random.default_rng([pid % 2**64, plen]).integers(3, vocab, size=plen)
    return tuple(int(t) for t in ids)


def _load(path: Path, steps: list[int] | None) -> tuple[Trace, list[int]]:
    try:
        trace = load_valid_trace(path)
    except TraceError as exc:
        raise WorkloadError(exc.one_line()) from None
    if steps:
        missing = sorted(set(steps) - set(trace.steps))
        if missing:
            raise WorkloadError(f"trace {path}: has no step {missing[0]} (steps {trace.steps})")
    return trace, steps or trace.steps


def from_trace(
    path: Path,
    vocab: int,
    steps: list[int] | None = None,
    max_context: int | None = None,
    *,
    scale: float = 1.0,
    requests: int | None = None,
) -> Workload:
    """The trace's steps as live work: its lengths (times `scale`), its acceptance, the
    first `requests` requests of each step (whole groups)."""
    if not scale > 0:
        raise WorkloadError(f"trace {path}: --trace-scale must be > 0, got {scale}")
    trace, chosen = _load(path, steps)
    df = trace.df
    step_col = df["step"].to_numpy()
    picked = {s: first_requests(df, np.flatnonzero(step_col == s), requests) for s in chosen}
    sel = np.concatenate([picked[s] for s in chosen]) if chosen else np.array([], np.int64)
    plen = np.array([scaled(int(x), scale) for x in df["prompt_len"].to_numpy()[sel]], np.int64)
    rlen = np.array([scaled(int(x), scale) for x in df["response_len"].to_numpy()[sel]], np.int64)
    keys = [
        f"step {a}, prompt {b}, sample {c}" for a, b, c in df[["step", "prompt_id", "sample"]].to_numpy()[sel]
    ]
    check_context(f"trace {path}", plen + rlen, max_context, keys)
    accs = dict(zip(sel.tolist(), acceptance_rows(trace, sel, scale), strict=True))
    lens = dict(zip(sel.tolist(), zip(plen.tolist(), rlen.tolist(), strict=True), strict=True))
    work = []
    for s in chosen:
        reqs = []
        for i in picked[s].tolist():
            p, r = lens[i]
            reqs.append(
                RequestSpec(
                    prompt_id=int(df["prompt_id"].iat[i]),
                    sample=int(df["sample"].iat[i]),
                    prompt=trace_prompt_ids(trace, i, p, vocab),
                    max_tokens=max(r, scaled(int(df["max_tokens"].iat[i]), scale)),
                    budget=r,
                    finish_reason=str(df["finish_reason"].iat[i]),
                    acceptance=accs[i],
                )
            )
        epoch = int(df["epoch"].iat[picked[s][0]]) if "epoch" in df.columns else 0
        work.append(StepWork(step=int(s), epoch=epoch, requests=reqs))
    meta = trace.meta
    return Workload(
        work,
        meta.group_size,
        stop_on_eos=False,
        source={
            "kind": "trace",
            "path": str(path),
            "preset": meta.preset,
            "seed": meta.seed,
            "model": meta.model,
            "trace_scale": scale,
            "trace_requests": requests,
        },
        timing=meta.timing,
        oracle=True,
        trace_rates=token_weighted_rates(
            (r.acceptance, r.budget) for w in work for r in w.requests if r.acceptance is not None
        ),
    )


def offline_profile(workload: Workload) -> dict[str, float]:
    """What a policy is told before the first step (`Policy.offline_profile`): the first
    step's per-token acceptance by method, weighted by response tokens, as the simulator
    tells it from the same trace (sim/offline_profile.py), so a policy that plans from a
    profile starts from the same one in both executors. Empty for a prompts workload."""
    if not workload.steps:
        return {}
    first = workload.steps[0].requests
    return token_weighted_rates((r.acceptance, r.budget) for r in first if r.acceptance is not None)


def build_workload(
    opts: WorkloadOptions, tokenizer: Any | None, vocab: int, max_context: int | None = None
) -> Workload:
    """`simctl live`'s workload: the trace's (its steps `steps_text`, N or A:B) or the
    prompts' (`steps_text` steps). Raises WorkloadError or ValueError, one line each."""
    if not opts.trace_path and (opts.trace_scale != 1.0 or opts.trace_requests is not None):
        raise WorkloadError("--trace-scale and --trace-requests shape a --trace replay: give --trace")
    if opts.trace_path:
        steps = None
        if opts.trace_path.exists():
            from simctl.traces.cli_options import parse_steps
            from simctl.traces.io import read_trace

            available = read_trace(opts.trace_path, columns=["step"]).steps
            steps = parse_steps(opts.steps_text, available) if opts.steps_text else None
        return from_trace(
            opts.trace_path,
            vocab,
            steps,
            max_context,
            scale=opts.trace_scale,
            requests=opts.trace_requests,
        )
    work = from_prompts(
        read_prompts(opts.prompts_path),
        tokenizer,
        vocab,
        group_size=opts.group_size,
        max_tokens=opts.max_tokens,
        steps=prompt_steps(opts.steps_text),
        prompts_per_step=opts.prompts_per_step,
    )
    needs = np.array([len(r.prompt) + r.budget for s in work.steps for r in s.requests], np.int64)
    check_context("prompts with --max-tokens", needs, max_context)
    return work


#: The most RL steps a prompts workload may ask for (more is a typo that would run for ever).
MAX_PROMPT_STEPS = 1_000_000


def prompt_steps(text: str | None) -> int:
    """--steps of a prompts workload: how many RL steps, 1 to MAX_PROMPT_STEPS (1 if not
    given); WorkloadError naming the option otherwise (0 ran nothing and printed a table of
    zeros, text was Python's "invalid literal for int()")."""
    if not text:
        return 1
    value = text.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 7 and 1 <= int(value) <= MAX_PROMPT_STEPS):
        raise WorkloadError(
            f"--steps {text[:40]!r}: with prompts, the number of RL steps, 1 to {MAX_PROMPT_STEPS}"
        )
    return int(value)
