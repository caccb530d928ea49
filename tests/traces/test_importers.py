"""`simctl trace import`: each framework's dump, written here exactly as the upstream code
writes it (the importer docstrings name that code), imports into a valid trace with the
numbers the dump holds, records its provenance, and replays; hostile dumps are refused in
one line and leave no output behind."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.sim.models import get_model
from simctl.traces.importers.common import FormatFacts, ImportOptions, RowSet, build_trace, stable_id
from simctl.traces.validate import load_valid_trace

MODEL = "qwen2.5-7b"
POLICIES = ("verl", "ngram", "seer", "rhymerl")
EOS = 1  # id of "</s>" in the fixture tokenizer


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer: "wN" is id N + 2, "[UNK]" 0, "</s>" 1 (no hub)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "</s>": EOS, **{f"w{i}": i + 2 for i in range(200)}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    out = tmp_path_factory.mktemp("tok")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="</s>")
    fast.save_pretrained(str(out))
    return out


def words(ids: list[int]) -> str:
    return " ".join(f"w{i - 2}" for i in ids)


def response_ids(seed: int, n: int) -> list[int]:
    """A repetitive response (so n-gram drafters find matches), ids >= 2."""
    pattern = [10 + seed % 7, 20 + seed % 5, 30 + seed % 3]
    return [pattern[i % 3] if i % 5 else 40 + (seed + i) % 9 for i in range(n)]


PROMPTS = [[5, 6, 7], [8, 9, 10, 11], [12, 13]]
# (step, prompt index, sample, response length); responses of length 12 reach the budget
PLAN = [
    (s, p, k, 3 + (s * 7 + p * 5 + k * 3) % 10 if (p, k) != (1, 2) else 12)
    for s in (1, 2)
    for p in range(3)
    for k in range(4)
]
BUDGET = 12
N_CLIPPED = sum(n == BUDGET for *_, n in PLAN)


def run(*args: str) -> Any:
    return CliRunner().invoke(main, [*args], catch_exceptions=False)


def import_ok(tmp_path: Path, fmt: str, *paths: Path, extra: tuple[str, ...] = ()) -> Any:
    out = tmp_path / f"{fmt}.parquet"
    res = run("trace", "import", fmt, *map(str, paths), "-o", str(out), "--model", MODEL, *extra)
    assert res.exit_code == 0, res.output
    trace = load_valid_trace(out)
    assert trace.meta.notes["import"]["format"] == fmt
    assert trace.meta.model == get_model(MODEL).name and trace.meta.source == "converted"
    return trace, out


def import_fails(tmp_path: Path, fmt: str, *paths: Path, extra: tuple[str, ...] = ()) -> str:
    out = tmp_path / "bad.parquet"
    res = run("trace", "import", fmt, *map(str, paths), "-o", str(out), "--model", MODEL, *extra)
    assert res.exit_code != 0
    assert not out.exists() and not list(tmp_path.glob(".bad.parquet.tmp-*"))
    lines = [line for line in res.output.strip().splitlines() if line]
    assert len(lines) == 1, res.output
    return lines[0]


def replays(out: Path, policies: tuple[str, ...] = POLICIES) -> None:
    args = ["replay", str(out), "--cluster", "h100x8:tp1"]
    for p in policies:
        args += ["--policy", p]
    res = run(*args)
    assert res.exit_code == 0, res.output
    for p in policies:
        assert p in res.output


# --- verl ---------------------------------------------------------------------------------


def write_verl(root: Path) -> Path:
    """`{global_step}.jsonl` as `_dump_generations` writes it: rows reordered (balance_batch)."""
    root.mkdir()
    for step in (1, 2):
        rows = [r for r in PLAN if r[0] == step][::-1]  # balanced order: not grouped
        lines = [
            {
                "input": words(PROMPTS[p]),
                "output": words(response_ids(p * 10 + k, n - (n < BUDGET))),
                "gts": "42",
                "score": float(k % 2),
                "step": step,
                "acc": bool(k % 2),
            }
            for _, p, k, n in rows
        ]
        (root / f"{step}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return root


def test_verl_imports_lengths_groups_and_tokens(tmp_path: Path, tokenizer_dir: Path) -> None:
    dump = write_verl(tmp_path / "rollout_data")
    extra = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET), "--steps-per-epoch", "1")
    trace, out = import_ok(tmp_path, "verl", dump, extra=extra)
    df = trace.df
    assert len(df) == 24 and trace.meta.group_size == 4 and sorted(df["step"].unique()) == [1, 2]
    assert df["epoch"].tolist() == [0] * 12 + [1] * 12
    # the prompt keeps its id across steps; lengths come from the tokenizer (+ EOS when it stopped)
    ids = df.groupby("step")["prompt_id"].apply(lambda s: sorted(set(s)))
    assert ids[1] == ids[2] == sorted(stable_id(words(p)) for p in PROMPTS)
    assert sorted(df["prompt_len"].unique()) == [2, 3, 4]
    expected = sorted(n for s, _, _, n in PLAN)
    assert sorted(df["response_len"]) == expected
    clipped = df["finish_reason"] == "length"
    assert clipped.sum() == N_CLIPPED and (df.loc[clipped, "response_len"] == BUDGET).all()
    vals, off = trace.token_arrays("response_tokens")
    last = vals[off[1:] - 1]
    assert (last[~clipped.to_numpy()] == EOS).all()
    assert trace.meta.notes["import"]["files"] == [str(dump / "1.jsonl"), str(dump / "2.jsonl")]
    replays(out)


def test_a_byte_order_mark_is_not_part_of_the_json(tmp_path: Path, tokenizer_dir: Path) -> None:
    """A dump saved again by an editor that writes a UTF-8 byte-order mark imports as it
    did without one (the mark was 'not JSON (Unexpected UTF-8 BOM ...)')."""
    dump = write_verl(tmp_path / "d")
    extra = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET))
    plain, _ = import_ok(tmp_path, "verl", dump, extra=extra)
    for f in dump.glob("*.jsonl"):
        f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes())
    marked, _ = import_ok(tmp_path, "verl", dump, extra=extra)
    pd.testing.assert_frame_equal(marked.df, plain.df)


def test_verl_needs_a_tokenizer_and_a_budget(tmp_path: Path, tokenizer_dir: Path) -> None:
    dump = write_verl(tmp_path / "d")
    assert "--tokenizer" in import_fails(tmp_path, "verl", dump)
    line = import_fails(tmp_path, "verl", dump, extra=("--tokenizer", str(tokenizer_dir)))
    assert "--max-tokens" in line


CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system w150<|im_end|>{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{% endif %}"
)


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The word-level tokenizer with ChatML's special tokens, the role names and a ChatML
    template that writes a default system message (as Qwen's and SmolLM2's do)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "</s>": EOS, **{f"w{i}": i + 2 for i in range(200)}}
    vocab.update({"system": 202, "user": 203, "assistant": 204})
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="[UNK]",
        eos_token="</s>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHATML
    out = tmp_path_factory.mktemp("chatml")
    fast.save_pretrained(str(out))
    return out


def test_verl_prompts_count_the_chat_templates_special_tokens(
    tmp_path: Path, chatml_dir: Path, tokenizer_dir: Path
) -> None:
    """verl renders the chat through the template and its dump decodes the prompt without
    special tokens: the chat (a user message, after a system message or earlier turns) is
    read off the text and rendered back, so its length is the rollout's, ChatML's markers
    included; a text no chat renders to is encoded as it is, and the notes count both."""
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(chatml_dir), local_files_only=True)
    chats = [
        [{"role": "user", "content": "w5 w6 w7"}],
        [{"role": "system", "content": "w9"}, {"role": "user", "content": "w8 w9 w10 w11"}],
        [
            {"role": "user", "content": "w12"},
            {"role": "assistant", "content": "w13"},
            {"role": "user", "content": "w14"},
        ],
    ]

    def encode(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    true_ids = [encode(tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)) for c in chats]
    true_ids.append(encode("w20 w21"))  # (a prompt no chat template rendered)
    texts = [tok.decode(ids, skip_special_tokens=True) for ids in true_ids]
    assert [len(i) for i in true_ids] == [12, 13, 18, 2]
    assert [len(encode(t)) for t in texts] == [7, 8, 9, 2]  # (the text alone: short by the markers)
    root = tmp_path / "dump"
    root.mkdir()
    lines = [
        {"input": texts[p], "output": words(response_ids(p * 4 + k, 5)), "score": 1.0, "step": 1}
        for p in range(4)
        for k in range(2)
    ]
    (root / "1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    trace, _ = import_ok(tmp_path, "verl", root, extra=("--tokenizer", str(chatml_dir), "--max-tokens", "64"))
    assert sorted(trace.df.groupby("prompt_id")["prompt_len"].first()) == [2, 12, 13, 18]
    vals, off = trace.token_arrays("prompt_tokens")
    got = sorted(vals[off[i] : off[i + 1]].tolist() for i in range(len(off) - 1))
    assert got == sorted(ids for ids in true_ids for _ in range(2))
    assert trace.meta.notes["import"]["prompts"].startswith("6 of 8 rendered back through the chat template")
    # the same tokenizer without its template: encoded as text, and the notes say so
    plain, _ = import_ok(
        tmp_path,
        "verl",
        root,
        extra=("--tokenizer", str(tokenizer_dir_of(chatml_dir, tmp_path)), "--max-tokens", "64"),
    )
    assert sorted(plain.df.groupby("prompt_id")["prompt_len"].first()) == [2, 7, 8, 9]
    assert "no chat template" in plain.meta.notes["import"]["prompts"]
    # the fixture tokenizer of the other tests has no template either
    assert (
        "no chat template"
        in import_ok(
            tmp_path,
            "verl",
            write_verl(tmp_path / "v"),
            extra=("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET)),
        )[0].meta.notes["import"]["prompts"]
    )


_CONTENT = st.lists(st.integers(0, 199).map(lambda i: f"w{i}"), max_size=6).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    system=st.one_of(st.none(), _CONTENT),
    exchanges=st.lists(st.tuples(_CONTENT, _CONTENT), max_size=3),
    last=_CONTENT,
)
def test_templated_prompts_recover_the_rollouts_ids(
    chatml_dir: Path, system: str | None, exchanges: list[tuple[str, str]], last: str
) -> None:
    """Property: any chat of the forms read (a user message after up to three exchanges,
    with or without a system message), rendered as verl renders it and decoded as its dump
    decodes it, is read back to exactly the ids the rollout fed the model."""
    from simctl.traces.importers.tokenize import TemplatedPrompts, load_tokenizer

    tok = load_tokenizer(chatml_dir, "verl")
    chat = [{"role": "system", "content": system}] if system is not None else []
    for user, assistant in exchanges:
        chat += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    chat.append({"role": "user", "content": last})
    rendered = tok.hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    truth = list(tok.hf(rendered, add_special_tokens=False)["input_ids"])
    text = tok.hf.decode(truth, skip_special_tokens=True)
    ids, recovered = TemplatedPrompts(tok).encode([text])
    assert recovered == 1 and ids == [truth]


# The run's own template (verl's custom_chat_template): no default system message, and
# Qwen3-like, a marker after the generation prompt where thinking is turned off.
RUN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant"
    "{% if enable_thinking is defined and not enable_thinking %} w199{% endif %}{% endif %}"
)


def test_verl_prompts_rendered_with_the_runs_template_and_arguments(tmp_path: Path, chatml_dir: Path) -> None:
    """A run that rendered prompts with its own template (`--chat-template`) and template
    arguments (`--chat-template-kwarg`, verl's apply_chat_template_kwargs) is read back to
    the rollout's exact ids only with both; the tokenizer's template alone gives other
    lengths, and the notes say which template and arguments were used."""
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(chatml_dir), local_files_only=True)
    chats = [
        [{"role": "user", "content": "w5 w6 w7"}],
        [{"role": "system", "content": "w9"}, {"role": "user", "content": "w8 w9 w10"}],
    ]
    true_ids = [
        list(
            tok(
                tok.apply_chat_template(
                    c,
                    chat_template=RUN_TEMPLATE,
                    tokenize=False,
                    add_generation_prompt=True,
                    enable_thinking=False,
                ),
                add_special_tokens=False,
            )["input_ids"]
        )
        for c in chats
    ]
    assert [len(i) for i in true_ids] == [9, 13]
    root = tmp_path / "dump"
    root.mkdir()
    lines = [
        {
            "input": tok.decode(true_ids[p], skip_special_tokens=True),
            "output": words(response_ids(p * 4 + k, 5)),
            "score": 1.0,
            "step": 1,
        }
        for p in range(2)
        for k in range(2)
    ]
    (root / "1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    template = tmp_path / "run.jinja"
    template.write_text(RUN_TEMPLATE)
    base = ("--tokenizer", str(chatml_dir), "--max-tokens", "64")
    trace, _ = import_ok(
        tmp_path,
        "verl",
        root,
        extra=(*base, "--chat-template", str(template), "--chat-template-kwarg", "enable_thinking=false"),
    )
    vals, off = trace.token_arrays("prompt_tokens")
    got = sorted(vals[off[i] : off[i + 1]].tolist() for i in range(len(off) - 1))
    assert got == sorted(ids for ids in true_ids for _ in range(2))
    notes = trace.meta.notes["import"]
    assert notes["prompts"] == "rendered back through the chat template"
    assert notes["chat_template"].startswith("run.jinja (sha256 ")
    assert notes["chat_template_kwargs"] == {"enable_thinking": False}
    # the template without its argument, or the tokenizer's own: not the rollout's ids
    for extra in (("--chat-template", str(template)), ()):
        other, _ = import_ok(tmp_path, "verl", root, extra=(*base, *extra))
        assert sorted(other.df.groupby("prompt_id")["prompt_len"].first()) != [9, 13]
        assert other.meta.notes["import"]["prompts"].startswith("0 of 4")


def test_roll_messages_rendered_with_the_runs_template(tmp_path: Path, chatml_dir: Path) -> None:
    """ROLL's `chatml` template is not the tokenizer's: given as a file, the `messages` are
    rendered with it (no default system message: four tokens fewer than the tokenizer's)."""
    dump = write_roll(tmp_path / "dump")
    for f in dump.glob("*.jsonl"):
        data = json.loads(f.read_text())
        data["messages"] = [json.dumps([{"role": "user", "content": p}]) for p in data.pop("prompt")]
        f.write_text(json.dumps(data) + "\n")
    template = tmp_path / "chatml.jinja"
    template.write_text(RUN_TEMPLATE)
    want = sorted(len(PROMPTS[p]) for _, p, _, _ in PLAN)
    own, _ = import_ok(tmp_path, "roll", dump, extra=("--tokenizer", str(chatml_dir)))
    # <|im_start|> system w150 <|im_end|> <|im_start|> user ... <|im_end|> <|im_start|> assistant
    assert sorted(own.df["prompt_len"]) == [n + 9 for n in want]
    run_t, _ = import_ok(
        tmp_path, "roll", dump, extra=("--tokenizer", str(chatml_dir), "--chat-template", str(template))
    )
    assert sorted(run_t.df["prompt_len"]) == [n + 5 for n in want]
    assert run_t.meta.notes["import"]["chat_template"].startswith("chatml.jinja")


def test_chat_template_options_refuse_bad_input(
    tmp_path: Path, chatml_dir: Path, tokenizer_dir: Path
) -> None:
    """A template that does not render, a file that is not text, arguments that are not
    KEY=VALUE or that the importer sets itself, or arguments for a tokenizer without a
    template: one line each, nothing written; for a format that renders no template the
    options are said to be unused."""
    dump = write_verl(tmp_path / "d")
    base = ("--tokenizer", str(chatml_dir), "--max-tokens", str(BUDGET))
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m['content'] }")
    line = import_fails(tmp_path, "verl", dump, extra=(*base, "--chat-template", str(broken)))
    assert str(broken) in line and "cannot render" in line
    raising = tmp_path / "raising.jinja"
    raising.write_text("{{ raise_exception('only system+user chats') }}")
    assert "only system+user chats" in import_fails(
        tmp_path, "verl", dump, extra=(*base, "--chat-template", str(raising))
    )
    binary = tmp_path / "binary.jinja"
    binary.write_bytes(b"\xff\xfe{{ x }}")
    assert "not UTF-8" in import_fails(tmp_path, "verl", dump, extra=(*base, "--chat-template", str(binary)))
    empty = tmp_path / "empty.jinja"
    empty.write_text("  \n")
    assert "empty" in import_fails(tmp_path, "verl", dump, extra=(*base, "--chat-template", str(empty)))
    line = import_fails(
        tmp_path, "verl", dump, extra=("--tokenizer", str(tokenizer_dir), "--chat-template-kwarg", "a=1")
    )
    assert "no chat template" in line
    out = tmp_path / "bad.parquet"

    def verl_import(*extra: str) -> Any:
        return run("trace", "import", "verl", str(dump), "-o", str(out), "--model", MODEL, *base, *extra)

    for bad, said in (("enable_thinking", "KEY=VALUE"), ("=1", "KEY=VALUE"), ("tokenize=true", "importer")):
        res = verl_import("--chat-template-kwarg", bad)
        assert res.exit_code == 2 and said in res.output and not out.exists()
    res = verl_import("--chat-template-kwarg", "x=1", "--chat-template-kwarg", "x=2")
    assert res.exit_code == 2 and "given twice" in res.output and not out.exists()
    slime = write_slime(tmp_path / "s")
    res = run(
        "trace", "import", "slime", str(slime), "-o", str(tmp_path / "s.parquet"), "--model", MODEL,
        "--max-tokens", "16", "--chat-template", str(broken),
    )  # fmt: skip
    assert res.exit_code == 0 and "--chat-template not used" in res.output


def tokenizer_dir_of(templated: Path, tmp_path: Path) -> Path:
    """A copy of a tokenizer directory without its chat template."""
    out = tmp_path / "no-template"
    shutil.copytree(templated, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in out.glob("chat_template.*"):
        extra.unlink()
    return out


# --- AReaL --------------------------------------------------------------------------------


def write_areal(root: Path) -> Path:
    """`rollout/<tail_version>/<task_id>.jsonl` as `_dump_trajectory` writes it."""
    for step, p, k, n in PLAN:
        task = step * 10 + p
        d = root / "rollout" / str(step)
        d.mkdir(parents=True, exist_ok=True)
        prompt_len = len(PROMPTS[p]) + 10
        rec = {
            "task_id": task,
            "sample_idx": k,
            "seqlen": prompt_len + n,
            "prompt_len": prompt_len,
            "head_version": step - 1,
            "tail_version": step,
            "reward": 1.0 if k == 0 else 0.0,
            "prompt": words(PROMPTS[p]),
            "completion": words(response_ids(k, n)),
        }
        with (d / f"{task}.jsonl").open("a") as f:
            f.write(json.dumps(rec) + "\n")
    ev = root / "eval-rollout" / "1"
    ev.mkdir(parents=True)
    (ev / "0.jsonl").write_text("not json\n")  # evaluation dumps are skipped
    return root


def test_areal_imports(tmp_path: Path, tokenizer_dir: Path) -> None:
    dump = write_areal(tmp_path / "log")
    trace, out = import_ok(tmp_path, "areal", dump, extra=("--max-tokens", str(BUDGET)))
    df = trace.df
    assert len(df) == 24 and trace.meta.group_size == 4
    assert sorted(df["response_len"]) == sorted(n for *_, n in PLAN)
    assert df["reward"].sum() == 6  # sample 0 of each of 6 groups
    assert (df.loc[df["sample"] == 0, "reward"] == 1).all()
    assert (df["finish_reason"] == "length").sum() == N_CLIPPED
    assert len(trace.meta.notes["import"]["files"]) == 6
    assert not trace.has_tokens()
    replays(out, ("verl",))  # speculative policies need tokens or accept_<method> columns
    # with the tokenizer the completions' ids match their lengths (the prompts', 10 short, do not)
    extra = ("--max-tokens", str(BUDGET), "--tokenizer", str(tokenizer_dir))
    tokens, out = import_ok(tmp_path, "areal", dump, extra=extra)
    assert tokens.has_tokens() and "prompt_tokens" not in tokens.lists
    pd.testing.assert_frame_equal(tokens.df, trace.df)
    replays(out)


def test_areal_short_group_is_dropped_with_group_size(tmp_path: Path) -> None:
    dump = write_areal(tmp_path / "log")
    f = dump / "rollout" / "1" / "10.jsonl"
    f.write_text("".join(f.read_text().splitlines(keepends=True)[:3]))  # one empty completion skipped
    assert "--group-size" in import_fails(tmp_path, "areal", dump, extra=("--max-tokens", "12"))
    trace, _ = import_ok(tmp_path, "areal", dump, extra=("--max-tokens", "12", "--group-size", "4"))
    assert len(trace.df) == 20 and trace.meta.notes["import"]["dropped_rows"] == 3
    # a group of half the size is refused too (it used to be taken for the group size,
    # cutting every full group in two, silently)
    f.write_text("".join(f.read_text().splitlines(keepends=True)[:2]))
    assert "(2, 4; most have 4); pass --group-size" in import_fails(
        tmp_path, "areal", dump, extra=("--max-tokens", "12")
    )


# --- NeMo-RL ------------------------------------------------------------------------------


def write_nemo(root: Path) -> Path:
    """`train_data_step{N}.jsonl` as `log_batched_dict_as_jsonl` writes GRPO's batch: every
    field a one-element list, token ids right-padded to the batch's longest sequence."""
    root.mkdir()
    for step in (1, 2):
        rows = [r for r in PLAN if r[0] == step]
        seqs = [(PROMPTS[p], response_ids(p + k, n)) for _, p, k, n in rows]
        width = max(len(a) + len(b) for a, b in seqs) + 3
        lines = []
        for i, ((prompt, resp), (_, _, k, _)) in enumerate(zip(seqs, rows, strict=True)):
            length = len(prompt) + len(resp)
            pad = width - length
            lines.append(
                {
                    "content": [[words(prompt), words(resp)]],
                    "rewards": [float(k)],
                    "input_lengths": [length],
                    "token_ids": [prompt + resp + [0] * pad],
                    "token_loss_mask": [[0] * len(prompt) + [1] * len(resp) + [0] * pad],
                    "sample_loss_mask": [1.0],
                    "advantages": [[0.5] * width],
                    "generation_logprobs": [[-0.1] * width],
                    "prev_logprobs": [[-0.1] * width],
                    "idx": i,
                }
            )
        (root / f"train_data_step{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_nemo_rl_imports_token_ids(tmp_path: Path) -> None:
    dump = write_nemo(tmp_path / "logs")
    trace, out = import_ok(tmp_path, "nemo-rl", dump, extra=("--max-tokens", str(BUDGET)))
    df = trace.df
    assert len(df) == 24 and trace.meta.group_size == 4
    row = df[(df["step"] == 2) & (df["prompt_id"] == stable_id(tuple(PROMPTS[1]))) & (df["sample"] == 3)]
    assert len(row) == 1
    i = int(row.index[0])
    vals, off = trace.token_arrays("response_tokens")
    n = dict(((s, p, k), n) for s, p, k, n in PLAN)[(2, 1, 3)]
    assert vals[off[i] : off[i + 1]].tolist() == response_ids(1 + 3, n)
    pvals, poff = trace.token_arrays("prompt_tokens")
    assert pvals[poff[i] : poff[i + 1]].tolist() == PROMPTS[1]
    assert float(row["reward"].iloc[0]) == 3.0
    replays(out)


# --- ROLL ---------------------------------------------------------------------------------


def write_roll(root: Path) -> Path:
    """`rollout_dump_data.step_{N}.jsonl`: ONE JSON object of columns per file."""
    root.mkdir()
    meta = json.dumps(
        {"generation_config": {"max_new_tokens": BUDGET, "num_return_sequences": 4, "temperature": 0.7}}
    )
    for step in (1, 2):
        rows = [r for r in PLAN if r[0] == step]
        data = {
            "global_step": [step] * len(rows),
            "id": [f"q{p}" for _, p, _, _ in rows],
            "prompt": [words(PROMPTS[p]) for _, p, _, _ in rows],
            "tag": ["math"] * len(rows),
            "domain": ["math_rule"] * len(rows),
            "responses": [words(response_ids(k, n - (n < BUDGET))) for _, _, k, n in rows],
            "scores": [0.5] * len(rows),
            "sampling_params": [meta] * len(rows),
        }
        (root / f"rollout_dump_data.step_{step}.jsonl").write_text(json.dumps(data) + "\n")
    return root


def test_roll_imports_generation_config(tmp_path: Path, tokenizer_dir: Path) -> None:
    dump = write_roll(tmp_path / "dump")
    trace, out = import_ok(tmp_path, "roll", dump, extra=("--tokenizer", str(tokenizer_dir)))
    df = trace.df
    assert trace.meta.group_size == 4 and trace.meta.temperature == pytest.approx(0.7)
    assert (df["max_tokens"] == BUDGET).all() and (df["reward"] == 0.5).all()
    assert sorted(df["response_len"]) == sorted(n for *_, n in PLAN)
    assert (df["finish_reason"] == "length").sum() == N_CLIPPED
    replays(out)


def test_roll_messages_are_rendered_with_the_chat_template(tmp_path: Path, tokenizer_dir: Path) -> None:
    """A `messages` column is the chat before the pipeline rendered it: its prompt length is
    the chat template's, with the generation prompt (joined contents left out the template's
    tokens: ROLL prompts came out about 45% short); without a template, they are joined."""
    templated = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, templated)
    config = json.loads((templated / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for m in messages %}w0 {{ m['content'] }} w1 {% endfor %}"
        "{% if add_generation_prompt %}w2{% endif %}"
    )
    (templated / "tokenizer_config.json").write_text(json.dumps(config))
    dump = write_roll(tmp_path / "dump")
    for f in dump.glob("*.jsonl"):
        data = json.loads(f.read_text())
        data["messages"] = [json.dumps([{"role": "user", "content": p}]) for p in data.pop("prompt")]
        f.write_text(json.dumps(data) + "\n")
    want = sorted(len(PROMPTS[p]) for _, p, _, _ in PLAN)
    trace, _ = import_ok(tmp_path, "roll", dump, extra=("--tokenizer", str(templated)))
    assert sorted(trace.df["prompt_len"]) == sorted(n + 3 for n in want)  # (w0 ... w1 w2)
    joined, _ = import_ok(tmp_path, "roll", dump, extra=("--tokenizer", str(tokenizer_dir)))
    assert sorted(joined.df["prompt_len"]) == want and "approximate" in joined.meta.notes["import"]["prompts"]


def test_roll_prefers_messages_where_the_dump_has_both(tmp_path: Path, chatml_dir: Path) -> None:
    """ROLL's datasets carry a bare `prompt` and a `messages` chat, both dumped; the pipeline
    renders `messages` (the RLVR examples set `messages: messages`), so its lengths are the
    template's: `prompt` was read and every prompt came out short."""
    dump = write_roll(tmp_path / "dump")
    for f in dump.glob("*.jsonl"):
        data = json.loads(f.read_text())
        data["messages"] = [
            json.dumps([{"role": "system", "content": "w1"}, {"role": "user", "content": p}])
            for p in data["prompt"]
        ]
        f.write_text(json.dumps(data) + "\n")
    trace, _ = import_ok(tmp_path, "roll", dump, extra=("--tokenizer", str(chatml_dir)))
    # <|im_start|> system w1 <|im_end|> <|im_start|> user ... <|im_end|> <|im_start|> assistant
    assert sorted(trace.df["prompt_len"]) == sorted(len(PROMPTS[p]) + 9 for _, p, _, _ in PLAN)
    assert trace.meta.notes["import"]["prompts_from"].startswith("messages")


def test_roll_prompts_carry_the_bos_its_encoding_adds(tmp_path: Path) -> None:
    """ROLL encodes the prompts with `tokenizer(text_list)` (special tokens at the default),
    so a tokenizer whose post-processor prepends BOS (Llama's, Gemma's) gave every prompt
    one; responses are generated ids and have none."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "</s>": EOS, "<s>": 202, **{f"w{i}": i + 2 for i in range(200)}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tk.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 202)]
    )
    bos = tmp_path / "bos-tok"
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", eos_token="</s>", bos_token="<s>"
    ).save_pretrained(str(bos))
    trace, _ = import_ok(tmp_path, "roll", write_roll(tmp_path / "dump"), extra=("--tokenizer", str(bos)))
    assert sorted(trace.df["prompt_len"]) == sorted(len(PROMPTS[p]) + 1 for _, p, _, _ in PLAN)
    vals, off = trace.token_arrays("prompt_tokens")
    assert (vals[off[:-1]] == 202).all()
    assert sorted(trace.df["response_len"]) == sorted(n for *_, n in PLAN)


# --- slime --------------------------------------------------------------------------------


def slime_sample(p: int, k: int, n: int, index: int, truncated: bool) -> dict[str, Any]:
    """`Sample.to_dict()`: the fields of slime's Sample, status as its value."""
    return {
        "group_index": p,
        "index": index,
        "rollout_id": None,
        "prompt": words(PROMPTS[p]),
        "tokens": PROMPTS[p] + response_ids(p * 4 + k, n),
        "multimodal_inputs": None,
        "response": words(response_ids(p * 4 + k, n)),
        "response_length": n,
        "label": "42",
        "reward": float(k == 1),
        "loss_mask": [1] * n,
        "weight_versions": ["1"],
        "rollout_log_probs": [-0.5] * n,
        "remove_sample": False,
        "status": "truncated" if truncated else "completed",
        "metadata": {},
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": n,
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": len(PROMPTS[p])},
    }


def write_slime(root: Path) -> Path:
    torch = pytest.importorskip("torch")
    root.mkdir()
    for step in (1, 2):
        samples = [
            slime_sample(p, k, n, i, n == BUDGET)
            for i, (_, p, k, n) in enumerate(r for r in PLAN if r[0] == step)
        ]
        torch.save({"rollout_id": step, "samples": samples}, root / f"{step}.pt")
    torch.save({"rollout_id": 1, "samples": []}, root / "eval_1.pt")  # evaluation: skipped
    return root


def test_slime_imports_token_ids_and_truncation(tmp_path: Path) -> None:
    dump = write_slime(tmp_path / "rollout_data")
    trace, out = import_ok(tmp_path, "slime", dump, extra=("--max-tokens", "16"))
    df = trace.df
    assert len(df) == 24 and trace.meta.group_size == 4
    clipped = df["finish_reason"] == "length"
    # status "truncated" below --max-tokens: another limit was that response's budget
    assert clipped.sum() == N_CLIPPED and (df.loc[clipped, "max_tokens"] == BUDGET).all()
    assert (df.loc[~clipped, "max_tokens"] == 16).all()
    assert df["reward"].sum() == 6
    assert trace.has_tokens() and "prompt_tokens" in trace.lists
    assert [Path(f).name for f in trace.meta.notes["import"]["files"]] == ["1.pt", "2.pt"]
    replays(out)


def test_slime_evaluation_files_of_a_prefixed_template_are_skipped(tmp_path: Path) -> None:
    """slime's docs save with `rollout_{rollout_id}.pt` or `data_{rollout_id}.pt`, so its
    evaluation files are `rollout_eval_N.pt`, holding the same `rollout_id` as the training
    file; read as training, their samples joined step N as groups of one (and the group
    size guess then cut every group to one)."""
    torch = pytest.importorskip("torch")
    root = write_slime(tmp_path / "rollout_data")
    first = torch.load(root / "1.pt", weights_only=False)["samples"]
    evaluation = [{**first[j], "group_index": None} for j in (0, 4, 8)]  # (one per prompt, no group)
    for f in sorted(root.glob("*.pt")):
        doc = torch.load(f, weights_only=False)
        if f.name == "eval_1.pt":
            doc["samples"] = evaluation
        torch.save(doc, root / f"rollout_{f.name}")
        f.unlink()
    trace, _ = import_ok(tmp_path, "slime", root, extra=("--max-tokens", "16"))
    assert len(trace.df) == 24 and trace.meta.group_size == 4
    assert [Path(f).name for f in trace.meta.notes["import"]["files"]] == ["rollout_1.pt", "rollout_2.pt"]


class Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("pickled code ran",))


def test_slime_refuses_pickled_objects(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    bad = tmp_path / "0.pt"
    torch.save({"rollout_id": 0, "samples": [Boom()]}, bad)
    line = import_fails(tmp_path, "slime", bad, extra=("--max-tokens", "16"))
    assert "only torch.load(weights_only=True)" in line and "pickled code ran" not in line
    plain = tmp_path / "1.pt"
    plain.write_bytes(pickle.dumps({"rollout_id": 0}))
    assert "not a readable torch.save file" in import_fails(
        tmp_path, "slime", plain, extra=("--max-tokens", "16")
    )
    # an empty file is damaged, not a security refusal
    plain.write_bytes(b"")
    line = import_fails(tmp_path, "slime", plain, extra=("--max-tokens", "16"))
    assert line.endswith("1.pt: not a readable torch.save file (EOFError: EOFError)"), line


# --- table --------------------------------------------------------------------------------


def table_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "iteration": s,
                "question": p,
                "k": k,
                "plen": len(PROMPTS[p]),
                "rlen": n,
                "reward": float(k),
                "response_tokens": json.dumps(response_ids(p + k, n)),
            }
            for s, p, k, n in PLAN
        ]
    )


def test_table_with_column_mapping(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    table_frame().to_csv(csv, index=False)
    cols = ("--column", "step=iteration", "--column", "prompt_id=question", "--column", "sample=k")
    cols += ("--column", "prompt_len=plen", "--column", "response_len=rlen", "--max-tokens", str(BUDGET))
    trace, out = import_ok(tmp_path, "table", csv, extra=cols)
    df = trace.df
    assert sorted(df["prompt_id"].unique()) == [0, 1, 2]  # kept as given
    assert df.loc[
        (df["step"] == 1) & (df["prompt_id"] == 2) & (df["sample"] == 3), "response_len"
    ].item() == next(n for s, p, k, n in PLAN if (s, p, k) == (1, 2, 3))
    assert trace.has_tokens()
    replays(out)


def test_table_parquet_and_jsonl_agree(tmp_path: Path) -> None:
    frame = table_frame().rename(
        columns={
            "iteration": "step",
            "question": "prompt_id",
            "k": "sample",
            "plen": "prompt_len",
            "rlen": "response_len",
        }
    )
    frame["max_tokens"] = BUDGET
    frame.to_parquet(tmp_path / "a.parquet")
    frame.to_json(tmp_path / "b.jsonl", orient="records", lines=True)
    a, _ = import_ok(tmp_path, "table", tmp_path / "a.parquet")
    b, _ = import_ok(tmp_path, "table", tmp_path / "b.jsonl")
    pd.testing.assert_frame_equal(a.df, b.df)


# --- hostile inputs -----------------------------------------------------------------------


def test_hostile_dumps_are_one_line(tmp_path: Path, tokenizer_dir: Path) -> None:
    opts = ("--max-tokens", "12")
    d = tmp_path / "in"
    d.mkdir()
    empty = d / "train_data_step1.jsonl"
    empty.write_text("")
    assert "no records" in import_fails(tmp_path, "nemo-rl", empty, extra=opts)
    empty.write_text("{not json\n")
    assert f"{empty} line 1: not JSON" in import_fails(tmp_path, "nemo-rl", empty, extra=opts)
    areal = d / "3.jsonl"
    good = {"task_id": 1, "sample_idx": 0, "seqlen": 9, "prompt_len": 4, "head_version": 0, "tail_version": 0}
    full = {**good, "reward": 1.0, "prompt": "a", "completion": "b"}
    no_reward = {k: v for k, v in full.items() if k != "reward"}
    areal.write_text(json.dumps(full) + "\n" + json.dumps(no_reward) + "\n")
    assert (
        import_fails(tmp_path, "areal", areal, extra=opts) == f"Error: {areal} line 2: field 'reward' missing"
    )
    areal.write_text(json.dumps({**full, "seqlen": "9"}) + "\n")
    assert "field 'seqlen' is '9', expected an integer" in import_fails(tmp_path, "areal", areal, extra=opts)
    areal.write_text(json.dumps({**full, "prompt_len": -4}) + "\n")
    assert "'prompt_len' -4" in import_fails(tmp_path, "areal", areal, extra=opts)
    # numbers an int64 column cannot hold, or no number at all, and text no tokenizer takes
    for value in ("NaN", "Infinity", str(10**30), "1e308", "9" * 5000):
        areal.write_text(json.dumps(full).replace('"seqlen": 9', f'"seqlen": {value}') + "\n")
        line = import_fails(tmp_path, "areal", areal, extra=opts)
        assert f"{areal} line 1: " in line and ("expected an integer" in line or "not JSON" in line), line
    table = d / "t.csv"
    for value in ("inf", "1" + "0" * 40):
        table.write_text(f"step,prompt_id,sample,prompt_len,response_len\n1,1,0,{value},5\n")
        line = import_fails(tmp_path, "table", table, extra=opts)
        assert f"{table} row 1: column 'prompt_len' is " in line and "np." not in line, line
    verl = d / "v"
    verl.mkdir()
    (verl / "1.jsonl").write_text(
        json.dumps({"input": "w1", "output": "w2", "score": 1, "step": 1}).replace('"w2"', '"\\ud800"') + "\n"
    )
    line = import_fails(tmp_path, "verl", verl, extra=(*opts, "--tokenizer", str(tokenizer_dir)))
    assert "cannot encode '\\ud800' of the dump" in line, line
    for option in ("--max-tokens", "--group-size", "--steps-per-epoch"):
        res = run(
            "trace",
            "import",
            "areal",
            str(areal),
            "-o",
            str(tmp_path / "x.parquet"),
            "--model",
            MODEL,
            *opts,
            option,
            str(10**30),
        )
        assert res.exit_code == 2 and f"'{option}': {10**30} is not in the range" in res.output, res.output
    import gzip

    areal.write_bytes(gzip.compress((json.dumps(full) + "\n").encode()))
    assert import_fails(tmp_path, "areal", areal, extra=opts).endswith(
        "gzip-compressed; decompress it first (gunzip)"
    )
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    (nothing / "readme.txt").write_text("x")
    assert "no slime dump files" in import_fails(tmp_path, "slime", nothing)
    assert "no ROLL dump files" in import_fails(
        tmp_path, "roll", nothing, extra=("--tokenizer", str(tokenizer_dir))
    )


def test_output_is_not_overwritten_when_not_a_trace(tmp_path: Path) -> None:
    dump = write_areal(tmp_path / "log")
    notes = tmp_path / "notes.parquet"
    notes.write_text("my notes")
    res = run("trace", "import", "areal", str(dump), "-o", str(notes), "--model", MODEL, "--max-tokens", "12")
    assert res.exit_code != 0 and notes.read_text() == "my notes"


def test_unknown_model_is_refused(tmp_path: Path) -> None:
    dump = write_areal(tmp_path / "log")
    res = run("trace", "import", "areal", str(dump), "-o", str(tmp_path / "t.parquet"), "--model", "gpt-9")
    assert res.exit_code == 2 and "unknown model 'gpt-9'" in res.output


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.one_of(
        st.text(max_size=40),
        st.dictionaries(st.text(max_size=8), st.none() | st.integers() | st.text(max_size=5), max_size=4).map(
            json.dumps
        ),
    )
)
def test_fuzzed_nemo_lines_never_crash(tmp_path: Path, line: str) -> None:
    """Any single line is imported or refused in one line; never a traceback."""
    path = tmp_path / "train_data_step1.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    out = tmp_path / "f.parquet"
    res = CliRunner().invoke(
        main, ["trace", "import", "nemo-rl", str(path), "-o", str(out), "--model", MODEL, "--max-tokens", "4"]
    )
    assert res.exit_code in (0, 1) and "internal error" not in res.output, res.output
    if res.exit_code:
        assert len(res.output.strip().splitlines()) == 1 and not out.exists()
    out.unlink(missing_ok=True)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 4),
    draws=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=12
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_grouping_property(size: int, draws: list[tuple[int, int, int]], seed: int) -> None:
    """Any shuffle of groups (a prompt drawn k times in a step gives k*G rows) becomes
    groups of exactly G, samples 0..G-1, unique keys, stable prompt ids, no row lost."""
    rng = np.random.default_rng(seed)
    entries = [(step, prompt) for step, prompt, k in draws for _ in range(k * size)]
    rows = RowSet(files=[Path("x")])
    for i in rng.permutation(len(entries)):
        step, prompt = entries[i]
        rows.add(
            f"x line {i}",
            step=step,
            group=f"p{prompt}",
            prompt=f"p{prompt}",
            order=int(i),
            prompt_len=3,
            response_len=2,
        )
    out = build_trace(rows, ImportOptions(model="m", max_tokens=4, group_size=size), FormatFacts(), "t", "u")
    df = out.df
    assert len(df) == len(entries) and out.dropped_rows == 0
    assert (df.groupby(["step", "prompt_id"]).size() == size).all()
    assert set(df["sample"]) == set(range(size))
    assert not df.duplicated(["step", "prompt_id", "sample"]).any()
    heads = {stable_id(f"p{p}") for _, p, _ in draws}
    assert heads <= set(df["prompt_id"])


# --- what real writers also produce (each checked against its writer's code) ---------------


def _nan_reward(path: Path, key: str, one: bool = False) -> None:
    """The first line's reward as a reward function's NaN, which json.dumps writes as NaN."""
    lines = path.read_text().splitlines()
    obj = json.loads(lines[0])
    obj[key] = [float("nan")] if one else float("nan")
    path.write_text("\n".join([json.dumps(obj), *lines[1:]]) + "\n")


@pytest.mark.parametrize("fmt", ["verl", "areal", "nemo-rl"])
def test_a_nan_reward_drops_the_reward_column_not_the_import(
    tmp_path: Path, tokenizer_dir: Path, fmt: str
) -> None:
    budget = ("--max-tokens", str(BUDGET))
    if fmt == "verl":
        dump, extra = write_verl(tmp_path / "d"), (*budget, "--tokenizer", str(tokenizer_dir))
        first, key, one = dump / "1.jsonl", "score", False
    elif fmt == "areal":
        dump, extra = write_areal(tmp_path / "d"), budget
        first, key, one = sorted((dump / "rollout" / "1").glob("*.jsonl"))[0], "reward", False
    else:
        dump, extra = write_nemo(tmp_path / "d"), budget
        first, key, one = dump / "train_data_step1.jsonl", "rewards", True
    clean, _ = import_ok(tmp_path, fmt, dump, extra=extra)
    assert "reward" in clean.df.columns
    _nan_reward(first, key, one)
    assert "NaN" in first.read_text()
    trace, _ = import_ok(tmp_path, fmt, dump, extra=extra)
    assert "reward" not in trace.df.columns  # (a trace's rewards are finite, or absent)
    assert trace.meta.notes["import"]["rewards_not_finite"] == 1
    pd.testing.assert_frame_equal(trace.df, clean.df.drop(columns="reward"))


def test_empty_files_the_writers_leave_are_counted_not_refused(tmp_path: Path, tokenizer_dir: Path) -> None:
    # AReaL opens a task's file before its loop, so a task whose every sample was skipped
    # leaves an empty file; verl writes "\n" for a step with an empty batch
    areal = write_areal(tmp_path / "a")
    (areal / "rollout" / "1" / "99.jsonl").write_text("")
    trace, _ = import_ok(tmp_path, "areal", areal, extra=("--max-tokens", str(BUDGET)))
    assert len(trace.df) == 24 and trace.meta.notes["import"]["empty_files"] == 1
    verl = write_verl(tmp_path / "v")
    (verl / "3.jsonl").write_text("\n")
    extra = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET))
    trace, _ = import_ok(tmp_path, "verl", verl, extra=extra)
    assert len(trace.df) == 24 and trace.meta.notes["import"]["empty_files"] == 1


def test_a_response_cut_inside_a_character_was_cut_at_its_budget(tmp_path: Path, tokenizer_dir: Path) -> None:
    """A decode cut inside a multi-byte character ends in U+FFFD, and the text encodes to
    fewer tokens than the budget (the character's byte tokens are one replacement character):
    it is truncated, not a response that stopped (no EOS), and its length is the budget (it
    was one short, and the budget recorded with it)."""
    dump = tmp_path / "rollout_data"
    dump.mkdir()
    outs = [words(response_ids(k, 5)) for k in range(3)] + [words(response_ids(9, BUDGET - 2)) + " \ufffd"]
    lines = [{"input": words(PROMPTS[0]), "output": out, "score": 0.0, "step": 1} for out in outs]
    (dump / "1.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    extra = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET))
    trace = import_ok(tmp_path, "verl", dump, extra=extra)[0]
    df = trace.df.sort_values("response_len")
    assert df["finish_reason"].tolist() == ["stop", "stop", "stop", "length"]
    # (5 words and the EOS added back; the cut one at its budget)
    assert df["response_len"].tolist() == [6, 6, 6, BUDGET] and (df["max_tokens"] == BUDGET).all()
    assert trace.meta.notes["import"]["responses_cut_inside_a_character"] == 1
    vals, off = trace.token_arrays("response_tokens")
    cut = int(np.flatnonzero(trace.df["response_len"].to_numpy() == BUDGET)[0])
    # the replacement character's id (the fixture's [UNK]) stands for the lost byte tokens
    assert vals[off[cut + 1] - 2 : off[cut + 1]].tolist() == [0, 0]


def test_a_verl_folder_above_two_dumps_is_refused(tmp_path: Path, tokenizer_dir: Path) -> None:
    """verl writes validation generations under the same `{step}.jsonl` names: merging them
    would double every group."""
    (tmp_path / "outputs").mkdir()
    write_verl(tmp_path / "outputs" / "rollout")
    write_verl(tmp_path / "outputs" / "validation")
    extra = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET))
    line = import_fails(tmp_path, "verl", tmp_path / "outputs", extra=extra)
    assert "1.jsonl is also in" in line and "one dump directory" in line


def test_areal_ranks_appending_to_one_file_are_refused(tmp_path: Path) -> None:
    """Without a single controller each data-parallel rank counts task ids from 0 and appends
    to the same `<version>/<task_id>.jsonl`: two prompts' samples would make one group."""
    dump = write_areal(tmp_path / "log")
    f = dump / "rollout" / "1" / "10.jsonl"
    other = [json.loads(x) for x in (dump / "rollout" / "1" / "11.jsonl").read_text().splitlines()]
    with f.open("a") as out:
        for obj in other:
            out.write(json.dumps({**obj, "task_id": 10}) + "\n")
    line = import_fails(tmp_path, "areal", dump, extra=("--max-tokens", str(BUDGET)))
    assert "sample_idx 0 of task 10 at version 1 again" in line and "data-parallel ranks" in line


def has_the_plan(trace: Any) -> None:
    """A text dump of PLAN imported with the fixture tokenizer: its groups, lengths and
    truncations exactly, and token ids for prompts and responses."""
    df = trace.df
    assert len(df) == 24 and trace.meta.group_size == 4
    got = sorted(zip(df["step"], df["prompt_len"], df["response_len"], strict=True))
    assert got == sorted((s, len(PROMPTS[p]), n) for s, p, _, n in PLAN)
    assert (df["finish_reason"] == "length").sum() == N_CLIPPED
    assert trace.has_tokens() and "prompt_tokens" in trace.lists  # (the prompts encode to their lengths)


@pytest.mark.parametrize(("observation", "from_zero"), [(False, False), (True, False), (True, True)])
def test_nemo_rl_before_0_6_imports_from_text_with_a_tokenizer(
    tmp_path: Path, tokenizer_dir: Path, observation: bool, from_zero: bool
) -> None:
    """v0.2.1-v0.5.0 wrote no token ids: `content` holds the prompt's rendered messages and
    the response's text, and `input_lengths` the prompt and generated tokens (the EOS of a
    response that stopped included). `run_multi_turn_rollout` appends the environment's
    observation after the last turn too ("Environment: correct"), so the real dumps end
    with it, counted in `input_lengths` with log-prob 0 on its tokens: it is neither the
    response nor the prompt (before, it was read as the response and the response as part
    of the prompt, every group of one). v0.2.1-v0.4.0 numbered the files from 0: the steps
    are still 1 and 2."""
    root = tmp_path / "logs"
    root.mkdir()
    env = response_ids(999, 3)
    for step in (1, 2):
        lines = []
        for i, (_, p, k, n) in enumerate(r for r in PLAN if r[0] == step):
            text = words(response_ids(p * 10 + k, n - (n < BUDGET)))  # (the EOS is not in the text)
            prompt, tail = len(PROMPTS[p]), len(env) if observation else 0
            logprobs = [0.0] * prompt + [-0.1] * n + [0.0] * (tail + 5)  # (+ padding)
            lines.append(
                {
                    "content": [[words(PROMPTS[p]), text, *([words(env)] if observation else [])]],
                    "rewards": [float(k)],
                    "generation_logprobs": [logprobs],
                    "prev_logprobs": [logprobs],
                    "input_lengths": [prompt + n + tail],
                    "idx": i,
                }
            )
        name = f"train_data_step{step - from_zero}.jsonl"
        (root / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    line = import_fails(tmp_path, "nemo-rl", root, extra=("--max-tokens", str(BUDGET)))
    assert "field 'token_ids' missing (NeMo-RL before 0.6.0 dumps text only: pass --tokenizer" in line
    extra = ("--max-tokens", str(BUDGET), "--tokenizer", str(tokenizer_dir))
    trace, out = import_ok(tmp_path, "nemo-rl", root, extra=extra)
    has_the_plan(trace)
    assert trace.meta.notes["import"]["prompt_tokens_matching_rows"] == 24
    replays(out)


def test_slime_dumps_with_numpy_images_details_and_aborted_samples(tmp_path: Path, capsys) -> None:
    """What real slime runs add: routing replay's experts as numpy arrays (v0.2.0-v0.3.0), a
    VLM run's PIL images, `--dump-details`' per-rank train_data files beside rollout_data,
    and a sample aborted before its first token. The result is the plain dump's."""
    torch = pytest.importorskip("torch")
    image = pytest.importorskip("PIL.Image")
    plain, _ = import_ok(tmp_path, "slime", write_slime(tmp_path / "plain"), extra=("--max-tokens", "16"))
    root = tmp_path / "details"
    (root / "rollout_data").mkdir(parents=True)
    (root / "train_data").mkdir()
    for step in (1, 2):
        samples = [
            {
                **slime_sample(p, k, n, i, n == BUDGET),
                "rollout_routed_experts": np.arange(6, dtype=np.int32).reshape(2, 3),
                "multimodal_inputs": {"images": [image.new("RGB", (2, 2))]},
            }
            for i, (_, p, k, n) in enumerate(r for r in PLAN if r[0] == step)
        ]
        aborted = {**slime_sample(0, 0, 1, 99, False), "status": "aborted", "response_length": 0}
        aborted["tokens"] = PROMPTS[0]
        torch.save({"rollout_id": step, "samples": [*samples, aborted]}, root / "rollout_data" / f"{step}.pt")
        torch.save({"rollout_id": step, "tokens": [[1, 2]]}, root / "train_data" / f"{step}_0.pt")
    trace, _ = import_ok(tmp_path, "slime", root, extra=("--max-tokens", "16"))
    pd.testing.assert_frame_equal(trace.df, plain.df)
    assert trace.meta.notes["import"]["samples_without_response"] == 2
    assert all("train_data" not in f for f in trace.meta.notes["import"]["files"])


def test_slime_refusal_names_what_it_would_build(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    bad = tmp_path / "0.pt"
    # (beside an allowed numpy array, which the message does not name)
    torch.save({"rollout_id": 0, "experts": np.arange(3), "samples": [Boom()]}, bad)
    line = import_fails(tmp_path, "slime", bad, extra=("--max-tokens", "16"))
    assert line.endswith("loading is allowed, and it would build builtins.print")


def test_roll_single_file_resumed_and_expanded_requests(tmp_path: Path, tokenizer_dir: Path) -> None:
    """ROLL before Oct 2025 appended a line of columns per step to one `rollout_data.jsonl`
    (a resumed run appends its steps again: the last writing counts); with
    `is_num_return_sequences_expand` the config says 1 return sequence per request, and the
    group size is what the `id` groups show."""
    extra = ("--tokenizer", str(tokenizer_dir))
    plain, _ = import_ok(tmp_path, "roll", write_roll(tmp_path / "plain"), extra=extra)
    lines = [
        json.loads((tmp_path / "plain" / f"rollout_dump_data.step_{s}.jsonl").read_text()) for s in (1, 2)
    ]
    stale = {**lines[1], "responses": [words([12, 13])] * len(lines[1]["responses"])}
    single = tmp_path / "single"
    single.mkdir()
    (single / "rollout_data.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (lines[0], stale, lines[1]))
    )
    trace, _ = import_ok(tmp_path, "roll", single, extra=extra)
    pd.testing.assert_frame_equal(trace.df, plain.df)
    expand = json.dumps({"generation_config": {"max_new_tokens": BUDGET, "num_return_sequences": 1}})
    for line in lines:
        line["sampling_params"] = [expand] * len(line["responses"])
    (single / "rollout_data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace, _ = import_ok(tmp_path, "roll", single, extra=extra)
    assert trace.meta.group_size == 4
    pd.testing.assert_frame_equal(trace.df, plain.df)


def write_areal_text(root: Path, again: bool = False) -> Path:
    """`<dump_dir>/<version>/<qid>.txt` as RLVRWorkflow.arun_episode appends them (AReaL
    v0.3.0-lite to v0.5.1): colorama's yellow-dim text; `again`: the first prompt's episode
    at version 1 appended a second time (the prompt drawn twice)."""
    colour, reset = "\x1b[33m\x1b[2m", "\x1b[0m"
    for step, p, k, n in PLAN + ([r for r in PLAN if r[:2] == (1, 0)] if again else []):
        d = root / str(step)
        d.mkdir(parents=True, exist_ok=True)
        record = "\n".join(
            [
                f"idx: {k + 1} / 4, seqlen: {len(PROMPTS[p]) + n}, reward is {float(k == 0)}.",
                f"prompt is \n{colour}{words(PROMPTS[p])}{reset}",
                f"sequence is: \n{colour}{words(response_ids(k, n))}{reset}",
            ]
        )
        with (d / f"q{p}.txt").open("a") as f:
            f.write(record + "\n")
    return root


def test_areal_before_0_5_2_text_dumps(tmp_path: Path, tokenizer_dir: Path) -> None:
    dump = write_areal_text(tmp_path / "generated")
    assert "--tokenizer" in import_fails(tmp_path, "areal", dump, extra=("--max-tokens", str(BUDGET)))
    extra = ("--max-tokens", str(BUDGET), "--tokenizer", str(tokenizer_dir))
    trace, out = import_ok(tmp_path, "areal", dump, extra=extra)
    has_the_plan(trace)
    assert trace.df["reward"].sum() == 6
    replays(out)
    # a prompt drawn twice at one version appends a second episode: a group of its own
    again, _ = import_ok(tmp_path, "areal", write_areal_text(tmp_path / "again", again=True), extra=extra)
    assert len(again.df) == 28 and again.df.groupby(["step", "prompt_id"]).ngroups == 7
    # multi_turn.py's episodes: a response that took two turns carries the last turn's
    # prompt (the first turn's inside it) and output only; refused, not misread
    mt = write_areal_text(tmp_path / "multi")
    f = next(iter(sorted((mt / "1").glob("*.txt"))))
    records = f.read_text().split("idx: ")
    second = records[2].replace("prompt is \n\x1b[33m\x1b[2m", "prompt is \n\x1b[33m\x1b[2mearlier turn ", 1)
    f.write_text("idx: ".join([*records[:2], second, *records[3:]]))
    line = import_fails(tmp_path, "areal", mt, extra=extra)
    assert "the episode's responses have different prompts, as multi_turn.py" in line
    (dump / "1" / "q0.txt").write_text("idx: 1 / 4, seqlen: 9, reward is 1.0.\nsomething else\n")
    line = import_fails(tmp_path, "areal", dump, extra=extra)
    assert line.endswith("q0.txt line 1: not an 'idx: i / n, seqlen: S, reward is R.' record")


def test_areal_text_keeps_carriage_returns_and_reads_the_eos_it_decoded(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    """The writer decodes with special tokens, so a completion that ends in the EOS token's
    text stopped, also when that token was the budget's last (it was recorded as cut at the
    budget); and the file is read as written: universal newlines turned a prompt's "\\r\\n"
    into "\\n" (a token fewer with a BPE tokenizer, and the response one longer)."""
    from simctl.traces.importers.areal_text import UPSTREAM, _records

    colour, reset = "\x1b[33m\x1b[2m", "\x1b[0m"
    d = tmp_path / "dump" / "1"
    d.mkdir(parents=True)
    prompt = "w5 w6\r\nw7\rw8"
    records = []
    for k, (body, n) in enumerate(
        [(words(response_ids(0, BUDGET - 1)) + " </s>", BUDGET), (words(response_ids(1, BUDGET)), BUDGET)]
        + [(words(response_ids(k, 5)) + " </s>", 6) for k in (2, 3)]
    ):
        records.append(
            f"idx: {k + 1} / 4, seqlen: {4 + n}, reward is 1.0.\n"
            f"prompt is \n{colour}{prompt}{reset}\n"
            f"sequence is: \n{colour}{body}{reset}\n"
        )
    (d / "q0.txt").write_bytes("".join(records).encode())
    assert _records(d / "q0.txt")[0][4] == prompt
    trace, _ = import_ok(
        tmp_path,
        "areal",
        tmp_path / "dump",
        extra=("--max-tokens", str(BUDGET), "--tokenizer", str(tokenizer_dir)),
    )
    df = trace.df.sort_values("sample")
    assert df["response_len"].tolist() == [BUDGET, BUDGET, 6, 6]
    assert df["finish_reason"].tolist() == ["stop", "length", "stop", "stop"]
    assert trace.meta.notes["import"]["upstream"] == UPSTREAM


# --- fan-out, dict rewards, multi-turn (each as its release's writer code makes it) ---------


def import_said(tmp_path: Path, fmt: str, path: Path, *extra: str) -> tuple[Any, str]:
    """`import_ok`, and what the command printed (stdout and stderr)."""
    out = tmp_path / f"{fmt}-said.parquet"
    res = run("trace", "import", fmt, str(path), "-o", str(out), "--model", MODEL, *extra)
    assert res.exit_code == 0, res.output
    return load_valid_trace(out), res.output


def write_slime_fanout(root: Path, field: str, fan: Any) -> Path:
    """A compact / sub-agent rollout (slime v0.3.0 on): the custom generate function returns
    `fan(sample)` siblings per input sample, copies of it (same `group_index` and `index`)
    carrying the input's `index` in `field` (`rollout_id`; `group_id` in v0.3.0), flattened
    in order as `_get_rollout_data` does."""
    torch = pytest.importorskip("torch")
    root.mkdir()
    for step in (1, 2):
        samples = []
        for i, (_, p, k, n) in enumerate(r for r in PLAN if r[0] == step):
            base = {**slime_sample(p, k, n, i, n == BUDGET), field: None}
            samples += [{**sibling, field: i} for sibling in fan(base)]
        torch.save({"rollout_id": step, "samples": samples}, root / f"{step}.pt")
    return root


@pytest.mark.parametrize("field", ["rollout_id", "group_id"])
def test_slime_fanned_out_rollouts_of_different_sizes(tmp_path: Path, field: str) -> None:
    """`compact_generate` (slime/rollout/_fanout_test_helpers.py) fans sample `index` out to
    1 + index % 3 deep copies: the groups hold 7 to 9 samples, which no trace can hold, so
    the refusal names the shared field and `--group-size 1`, which keeps every sample."""
    copies = [1 + i % 3 for i in range(12)]  # (by the sample's index in its step, 0..11)
    dump = write_slime_fanout(tmp_path / "d", field, lambda s: [s] * copies[s["index"]])
    line = import_fails(tmp_path, "slime", dump, extra=("--max-tokens", "16"))
    assert line == (
        f"Error: {dump / '1.pt'} sample 1: field '{field}' 1 is shared by 2 samples (a fan-out: one "
        "rollout split into several training samples), so the prompt groups (group_index) hold 7, 8, 9 "
        "samples, and a trace's groups are all one size; pass --group-size 1 to import each sample as a "
        "group of its own"
    )
    trace, _ = import_ok(tmp_path, "slime", dump, extra=("--max-tokens", "16", "--group-size", "1"))
    assert trace.meta.group_size == 1 and trace.meta.notes["import"]["dropped_rows"] == 0
    expected = [n for i, (*_, n) in enumerate(PLAN) for _ in range(copies[i % 12])]
    assert sorted(trace.df["response_len"]) == sorted(expected) and len(expected) == 48
    note = trace.meta.notes["import"]
    assert (note["fanout_rollouts"], note["fanout_samples"]) == (16, 40)


def test_slime_fan_out_of_one_size_keeps_the_prompt_groups(tmp_path: Path) -> None:
    """Every rollout split in two (`TrajectoryManager`: a chain, then a fork whose first
    prompt is longer and whose response is its own): each group holds its 4 rollouts' 8
    samples, each a response of its prompt's group."""

    def fork(s: dict[str, Any]) -> list[dict[str, Any]]:
        n = max(1, s["response_length"] - 2)
        prompt = [*s["tokens"][: -s["response_length"]], 60, 61]
        forked = {**s, "tokens": prompt + response_ids(7, n), "response_length": n, "status": "completed"}
        return [s, {**forked, "loss_mask": [1] * n, "rollout_log_probs": [-0.5] * n}]

    dump = write_slime_fanout(tmp_path / "d", "rollout_id", fork)
    trace, _ = import_ok(tmp_path, "slime", dump, extra=("--max-tokens", "16"))
    df = trace.df
    assert len(df) == 48 and trace.meta.group_size == 8
    assert df.groupby("step")["prompt_id"].apply(set).tolist() == [{stable_id(tuple(p)) for p in PROMPTS}] * 2
    assert sorted(df["prompt_len"]) == sorted(len(PROMPTS[p]) + x for _, p, _, _ in PLAN for x in (0, 2))
    assert sorted(df["response_len"]) == sorted(m for *_, n in PLAN for m in (n, max(1, n - 2)))
    note = trace.meta.notes["import"]
    assert (note["fanout_rollouts"], note["fanout_samples"]) == (24, 48)


def test_slime_dict_rewards_and_reward_key(tmp_path: Path) -> None:
    """`--rm-type dapo` rewards are `{"score": 1.0 or -1.0, "acc": bool, "pred": text}`, of
    which slime trains on `reward[--reward-key]`."""
    torch = pytest.importorskip("torch")
    dump = write_slime(tmp_path / "d")
    for step in (1, 2):
        pack = torch.load(dump / f"{step}.pt", weights_only=True)
        for s in pack["samples"]:
            s["reward"] = {"score": 1.0 if s["reward"] else -1.0, "acc": bool(s["reward"]), "pred": "42"}
        torch.save(pack, dump / f"{step}.pt")
    trace, said = import_said(tmp_path, "slime", dump, "--max-tokens", "16")
    assert "rewards left out: 24 are dicts; pass --reward-key KEY" in said
    assert "reward" not in trace.df.columns and trace.meta.notes["import"]["reward_dicts"] == 24
    keyed, _ = import_ok(tmp_path, "slime", dump, extra=("--max-tokens", "16", "--reward-key", "score"))
    assert keyed.df["reward"].sum() == 6 - 18 and keyed.meta.notes["import"]["reward_key"] == "score"
    pd.testing.assert_frame_equal(keyed.df.drop(columns="reward"), trace.df)
    line = import_fails(tmp_path, "slime", dump, extra=("--max-tokens", "16", "--reward-key", "nope"))
    assert line == (
        f"Error: {dump / '1.pt'} sample 0: field 'reward' has no key 'nope' (--reward-key; its keys: "
        "acc, pred, score)"
    )
    line = import_fails(tmp_path, "slime", dump, extra=("--max-tokens", "16", "--reward-key", "pred"))
    assert line.endswith("1.pt sample 0: field 'reward[pred]' is '42', expected a number")
    pack = torch.load(dump / "1.pt", weights_only=True)
    pack["samples"][3]["reward"]["score"] = float("nan")
    torch.save(pack, dump / "1.pt")
    nan, _ = import_ok(tmp_path, "slime", dump, extra=("--max-tokens", "16", "--reward-key", "score"))
    assert "reward" not in nan.df.columns and nan.meta.notes["import"]["rewards_not_finite"] == 1
    _, said = import_said(
        tmp_path, "areal", write_areal(tmp_path / "a"), "--max-tokens", "12", "--reward-key", "x"
    )
    assert "--reward-key not used: areal rewards are numbers" in said


def test_slime_status_and_reward_of_another_kind_are_refused(tmp_path: Path) -> None:
    """A status that is not one of `Sample.Status`'s values, or a reward that is text (not a
    number, a dict of numbers or absent), was imported with exit 0 and nothing said: the
    truncation it should tell, or the reward, silently lost."""
    torch = pytest.importorskip("torch")
    for field, value, told in [
        ("status", "weird", "'weird', expected one of pending, completed, truncated, aborted, failed"),
        ("status", "COMPLETED", "'COMPLETED', expected one of pending, completed"),
        ("reward", "x", "'x', expected a number or a dict of numbers"),
        ("reward", [1.0], "[1.0], expected a number or a dict of numbers"),
    ]:
        dump = write_slime(tmp_path / f"{field}-{value}")
        pack = torch.load(dump / "2.pt", weights_only=True)
        pack["samples"][5][field] = value
        torch.save(pack, dump / "2.pt")
        line = import_fails(tmp_path, "slime", dump, extra=("--max-tokens", "16"))
        assert line.startswith(f"Error: {dump / '2.pt'} sample 5: field '{field}' is {told}"), line
    # a sample not rewarded (None) imports, without rewards
    dump = write_slime(tmp_path / "unrewarded")
    pack = torch.load(dump / "2.pt", weights_only=True)
    pack["samples"][5]["reward"] = None
    torch.save(pack, dump / "2.pt")
    trace, _ = import_ok(tmp_path, "slime", dump, extra=("--max-tokens", "16"))
    assert "reward" not in trace.df.columns


# generated tokens of each turn of a group's 4 responses, BUDGET a turn: one turn; two, longer
# than a turn's budget together; three; two, the last cut at its budget
TURNS = [[5], [BUDGET, 7], [BUDGET, BUDGET, 3], [4, BUDGET]]


def test_nemo_rl_multi_turn_responses(tmp_path: Path) -> None:
    """`run_multi_turn_rollout` appends each turn's assistant message, then the environment's
    observation (after the last turn too); GRPO's `token_loss_mask` is 1 on the generated
    messages. A response is its turns, and its budget theirs."""
    root = tmp_path / "logs"
    root.mkdir()
    lines = []
    for p in range(2):
        for k, turns in enumerate(TURNS):
            seq, mask, content = list(PROMPTS[p]), [0] * len(PROMPTS[p]), [words(PROMPTS[p])]
            for t, n in enumerate(turns):
                out, obs = response_ids(k * 3 + t, n), [70 + t, 71, 72]
                seq, mask, content = (
                    seq + out + obs,
                    [*mask, *[1] * n, 0, 0, 0],
                    [*content, words(out), words(obs)],
                )
            pad = 50 - len(seq)
            lines.append(
                {
                    "content": [content],
                    "rewards": [float(k)],
                    "input_lengths": [len(seq)],
                    "token_ids": [seq + [0] * pad],
                    "token_loss_mask": [mask + [0] * pad],
                    "sample_loss_mask": [1.0],
                    "advantages": [[0.5] * 50],
                    "idx": len(lines),
                }
            )
    path = root / "train_data_step1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace, out = import_ok(tmp_path, "nemo-rl", root, extra=("--max-tokens", str(BUDGET)))
    df = trace.df
    assert trace.meta.group_size == 4 and len(df) == 8
    got = sorted(zip(df["response_len"], df["max_tokens"], df["finish_reason"], strict=True))
    # (response_len, max_tokens, finish_reason): 2 or 3 turns' budgets; the cut one at its length
    assert got == sorted([(5, 12, "stop"), (19, 24, "stop"), (27, 36, "stop"), (16, 16, "length")] * 2)
    assert trace.meta.notes["import"]["turns"] == {"1": 2, "2": 4, "3": 2}
    vals, off = trace.token_arrays("response_tokens")
    i = int(np.flatnonzero(df["response_len"].to_numpy() == 27)[0])
    assert vals[off[i] : off[i + 1]].tolist() == [
        t for j in range(3) for t in response_ids(6 + j, TURNS[2][j])
    ]
    replays(out)
    lines[1]["token_loss_mask"][0][len(PROMPTS[0]) + BUDGET] = 1  # (its first turn one token longer)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    line = import_fails(tmp_path, "nemo-rl", root, extra=("--max-tokens", str(BUDGET)))
    assert line.startswith(f"Error: {path} line 2: ")
    assert line.endswith(": turn 1 of 2 generated 13 tokens, above --max-tokens 12 (the budget of a turn)")


def write_areal_episodes(log: Path, step: int, task: int, p: int, episodes: list[list[int]]) -> None:
    """One task's `MultiTurnWorkflow` episodes of prompt `p` at `step`, as `_dump_trajectory`
    writes them: the sequence is the prompt, then each turn's output with the retry message
    before the next; `prompt_len` is the sequence less the outputs (seqlen - sum(loss_mask));
    the reward is 1 for an episode of one turn."""
    retry = [80, 81, 82, 83]
    records = []
    for k, turns in enumerate(episodes):
        seq = list(PROMPTS[p])
        for t, n in enumerate(turns):
            seq += (retry if t else []) + response_ids(k * 3 + t, n)
        end = len(seq) - sum(turns)
        records.append(
            {
                "task_id": task,
                "sample_idx": k,
                "seqlen": len(seq),
                "prompt_len": end,
                "head_version": step - 1,
                "tail_version": step,
                "reward": float(len(turns) == 1),
                "prompt": words(seq[:end]),
                "completion": words(seq[end:]),
            }
        )
    folder = log / "rollout" / str(step)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_areal_multi_turn_responses(tmp_path: Path) -> None:
    """`MultiTurnWorkflow` episodes as `_dump_trajectory` writes them: the sequence is the
    prompt, then each output with the retry message before the next; `prompt_len` is the
    sequence less the outputs, so the turns are not dumped, and a response longer than a
    turn's budget is given the fewest turns that hold it."""
    for p in range(2):
        write_areal_episodes(tmp_path / "log", 1, p, p, TURNS)
    # nothing in the dump says it is multi-turn: without --max-turns the budget is wrong
    line = import_fails(tmp_path, "areal", tmp_path / "log", extra=("--max-tokens", str(BUDGET)))
    assert f"exceeds the budget {BUDGET}" in line and "--max-turns N" in line
    line = import_fails(
        tmp_path, "areal", tmp_path / "log", extra=("--max-tokens", str(BUDGET), "--max-turns", "2")
    )
    assert f"response length 27 exceeds --max-turns 2 x --max-tokens {BUDGET}" in line
    trace, said = import_said(
        tmp_path, "areal", tmp_path / "log", "--max-tokens", str(BUDGET), "--max-turns", "3"
    )
    assert "6 responses longer than --max-tokens read as multi-turn" in said
    df = trace.df
    got = sorted(zip(df["response_len"], df["max_tokens"], df["finish_reason"], strict=True))
    # (27 tokens need 3 turns of 12; the 16 whose last turn was cut need only 2, not filled)
    assert got == sorted([(5, 12, "stop"), (19, 24, "stop"), (27, 36, "stop"), (16, 24, "stop")] * 2)
    assert sorted(df["prompt_len"]) == sorted(
        len(PROMPTS[p]) + 4 * (len(t) - 1) for p in range(2) for t in TURNS
    )
    assert trace.meta.notes["import"]["turns_at_least"] == {"2": 4, "3": 2}


# --- multi-turn samples: slime's loss mask, NeMo-RL v0.6.0 prompt history, AReaL prompt ids ---


def slime_turns_sample(p: int, k: int, index: int, turns: list[int]) -> dict[str, Any]:
    """A tool-calling generate function's sample (`examples/retool/generate_with_retool.py`,
    `search-r1`): each turn's output appended with `append_response_tokens(trainable=True)`,
    the tool's observation before the next with `trainable=False` (loss mask 0); the status
    is the last call's finish reason ("truncated" for "length")."""
    response: list[int] = []
    mask: list[int] = []
    for t, n in enumerate(turns):
        obs = [70 + t, 71, 72] if t else []
        response += obs + response_ids(k * 3 + t, n)
        mask += [0] * len(obs) + [1] * n
    base = slime_sample(p, k, len(response), index, turns[-1] == BUDGET)
    return {
        **base,
        "tokens": PROMPTS[p] + response,
        "response": words(response),
        "loss_mask": mask,
        "rollout_log_probs": [-0.5 if m else 0.0 for m in mask],
    }


def test_slime_multi_turn_samples_replay_their_generated_turns(tmp_path: Path) -> None:
    """`response_length` counts the tools' tokens too; the loss mask tells the turns, and a
    response is their generated tokens, its budget theirs (as NeMo-RL's)."""
    torch = pytest.importorskip("torch")
    root = tmp_path / "d"
    root.mkdir()
    samples = [slime_turns_sample(p, k, p * 4 + k, turns) for p in range(2) for k, turns in enumerate(TURNS)]
    torch.save({"rollout_id": 1, "samples": samples}, root / "1.pt")
    trace, out = import_ok(tmp_path, "slime", root, extra=("--max-tokens", str(BUDGET)))
    df = trace.df
    assert trace.meta.group_size == 4 and len(df) == 8
    got = sorted(zip(df["response_len"], df["max_tokens"], df["finish_reason"], strict=True))
    assert got == sorted([(5, 12, "stop"), (19, 24, "stop"), (27, 36, "stop"), (16, 16, "length")] * 2)
    assert sorted(df["prompt_len"]) == sorted(len(PROMPTS[p]) for p in range(2) for _ in TURNS)
    assert set(df["prompt_id"]) == {stable_id(tuple(p)) for p in PROMPTS[:2]}
    assert trace.meta.notes["import"]["turns"] == {"1": 2, "2": 4, "3": 2}
    vals, off = trace.token_arrays("response_tokens")
    i = int(np.flatnonzero(df["response_len"].to_numpy() == 27)[0])
    assert vals[off[i] : off[i + 1]].tolist() == [
        t for j in range(3) for t in response_ids(6 + j, TURNS[2][j])
    ]
    pvals, poff = trace.token_arrays("prompt_tokens")
    prompt = pvals[poff[i] : poff[i + 1]].tolist()
    assert prompt in PROMPTS[:2] and stable_id(tuple(prompt)) == df["prompt_id"].iloc[i]
    replays(out)
    # retool: an observation past the context is cut to fit and the sample marked truncated,
    # after a turn that stopped
    s = samples[1]
    samples[1] = {**s, "tokens": s["tokens"] + [73, 74], "response_length": s["response_length"] + 2}
    samples[1].update(loss_mask=s["loss_mask"] + [0, 0], status="truncated")
    torch.save({"rollout_id": 1, "samples": samples}, root / "1.pt")
    cut, _ = import_ok(tmp_path, "slime", root, extra=("--max-tokens", str(BUDGET)))
    pd.testing.assert_frame_equal(cut.df, df)
    line = import_fails(tmp_path, "slime", root, extra=("--max-tokens", "11"))
    assert line == (
        f"Error: {root / '1.pt'} sample 1: turn 1 of 2 generated 12 tokens, above --max-tokens 11 "
        "(the budget of a turn)"
    )
    samples[1]["loss_mask"] = samples[1]["loss_mask"][:-1]
    torch.save({"rollout_id": 1, "samples": samples}, root / "1.pt")
    line = import_fails(tmp_path, "slime", root, extra=("--max-tokens", str(BUDGET)))
    assert (
        line == f"Error: {root / '1.pt'} sample 1: field 'loss_mask' has 23 entries, 'response_length' is 24"
    )


@pytest.mark.parametrize("release", ["v0.3.1", "v0.3.0"])
def test_slime_agent_samples_use_their_mask_and_metadata(tmp_path: Path, release: str) -> None:
    """`TrajectoryManager.get_trajectory` (slime/agent/trajectory.py, v0.3.1 on): a session
    whose second leaf shares the first's turn A yields two samples of one rollout; the second
    re-emits A with loss mask 0 (context of its request); both are "completed" and carry
    `metadata["truncated"]`, their chain's last turn cut (v0.3.0, `fan_out_sample_segments`:
    `group_id`, and the segment's last `finish_reason` in the metadata). A rollout whose agent
    failed is `_abort_result`'s placeholder (examples/coding_agent_rl/generate.py): one
    token, mask 0."""
    torch = pytest.importorskip("torch")
    root = tmp_path / "d"
    root.mkdir()
    # (turn A, turn B and whether it was cut, turn C and whether it was cut) per rollout
    plan = [(BUDGET, 7, False, BUDGET, True), (4, BUDGET, True, 5, False)]
    samples = []
    for p in range(2):
        for r, (a, b, b_cut, c, c_cut) in enumerate(plan):
            index = p * 3 + r
            base = {**slime_sample(p, r, 1, index, False), "rollout_id": index, "reward": 1.0}
            if release == "v0.3.0":
                base["group_id"] = base.pop("rollout_id")
            turn_a = response_ids(r, a)
            for j, (tail, (n, cut)) in enumerate((([70, 71, 72], (b, b_cut)), ([73, 74, 75], (c, c_cut)))):
                out = response_ids(r + 6 - j, n)
                mask = [1 - j] * a + [0] * len(tail) + [1] * n
                md: dict[str, Any] = {"truncated": cut, "use_tool": True, "ill_formed": False}
                if release == "v0.3.0":
                    md = {"segment_kind": "final", "finish_reason": "length" if cut else "stop"}
                    md.update(segment_idx=j, num_segments=2)
                samples.append(
                    {
                        **base,
                        "tokens": PROMPTS[p] + turn_a + tail + out,
                        "response_length": len(mask),
                        "loss_mask": mask,
                        "rollout_log_probs": [-0.5 if m else 0.0 for m in mask],
                        "metadata": md,
                    }
                )
        aborted = {**slime_sample(p, 2, 1, p * 3 + 2, False), "tokens": [0, 0], "loss_mask": [0]}
        samples.append({**aborted, "status": "aborted", "remove_sample": True, "reward": 0.0})
    torch.save({"rollout_id": 1, "samples": samples}, root / "1.pt")
    trace, _ = import_ok(tmp_path, "slime", root, extra=("--max-tokens", str(BUDGET)))
    df = trace.df
    assert trace.meta.group_size == 4 and len(df) == 8
    got = sorted(
        zip(df["prompt_len"], df["response_len"], df["max_tokens"], df["finish_reason"], strict=True)
    )
    expected = [
        (0, 19, 24, "stop"),
        (BUDGET + 3, 12, 12, "length"),
        (0, 16, 16, "length"),
        (4 + 3, 5, 12, "stop"),
    ]
    assert got == sorted((len(PROMPTS[p]) + x, *rest) for p in range(2) for x, *rest in expected)
    assert set(df["prompt_id"]) == {stable_id(tuple(p)) for p in PROMPTS[:2]}
    note = trace.meta.notes["import"]
    assert note["samples_without_response"] == 2 and note["turns"] == {"1": 4, "2": 4}
    assert (note["fanout_rollouts"], note["fanout_samples"]) == (4, 8)
    vals, off = trace.token_arrays("response_tokens")
    pvals, poff = trace.token_arrays("prompt_tokens")
    i = int(np.flatnonzero(df["response_len"].to_numpy() == 5)[0])
    assert vals[off[i] : off[i + 1]].tolist() == response_ids(1 + 5, 5)
    assert pvals[poff[i] : poff[i + 1]].tolist()[-7:] == [*response_ids(1, 4), 73, 74, 75]


def nemo_history_line(p: int, k: int, turns: list[int], v060: bool, idx: int) -> dict[str, Any]:
    """A GRPO line whose prompt is a chat with an assistant message of its own (history H),
    then the generated turns, each followed by the environment's observation. Only the
    generated messages have `generation_logprobs` (`generate_responses`); the loss-mask loop
    gives the others zeros and mask 0, except v0.6.0's, which gives every assistant message
    mask 1 (fixed in c3bb1d78, v0.7.0: only messages with generation_logprobs)."""
    history, follow_up = [90, 91, 92, 93], [94, 95]
    seq = PROMPTS[p] + history + follow_up
    mask = [0] * len(PROMPTS[p]) + [int(v060)] * len(history) + [0] * len(follow_up)
    logprobs = [0.0] * len(seq)
    for t, n in enumerate(turns):
        out, obs = response_ids(k * 3 + t, n), [70 + t, 71, 72]
        seq, mask, logprobs = (
            seq + out + obs,
            [*mask, *[1] * n, 0, 0, 0],
            [*logprobs, *[-0.25] * n, 0.0, 0.0, 0.0],
        )
    pad = 60 - len(seq)
    return {
        "content": [[words(seq)]],
        "rewards": [float(k)],
        "input_lengths": [len(seq)],
        "token_ids": [seq + [0] * pad],
        "token_loss_mask": [mask + [0] * pad],
        "sample_loss_mask": [1.0],
        "advantages": [[0.5] * 60],
        "generation_logprobs": [logprobs + [0.0] * pad],
        "prev_logprobs": [[-0.3] * 60],
        "idx": idx,
    }


def test_nemo_rl_0_6_prompt_history_is_not_a_turn(tmp_path: Path) -> None:
    """v0.6.0 masks the prompt's own assistant message with 1; its zero log-probs tell it
    from the generated ones, so the prompt and the turns are those of v0.7.0's dump."""
    traces = {}
    for v060 in (True, False):
        root = tmp_path / f"logs{int(v060)}"
        root.mkdir()
        lines = [nemo_history_line(p, k, t, v060, p * 4 + k) for p in range(2) for k, t in enumerate(TURNS)]
        path = root / "train_data_step1.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        traces[v060], _ = import_ok(tmp_path, "nemo-rl", root, extra=("--max-tokens", str(BUDGET)))
    df = traces[True].df
    got = sorted(zip(df["response_len"], df["max_tokens"], df["finish_reason"], strict=True))
    assert got == sorted([(5, 12, "stop"), (19, 24, "stop"), (27, 36, "stop"), (16, 16, "length")] * 2)
    assert sorted(df["prompt_len"]) == sorted(len(PROMPTS[p]) + 6 for p in range(2) for _ in TURNS)
    assert set(df["prompt_id"]) == {stable_id((*p, 90, 91, 92, 93, 94, 95)) for p in PROMPTS[:2]}
    note = traces[True].meta.notes["import"]
    assert note["turns"] == {"1": 2, "2": 4, "3": 2} and note["prompts_with_assistant_history"] == 8
    pd.testing.assert_frame_equal(df, traces[False].df)
    for name in ("response_tokens", "prompt_tokens"):
        assert traces[True].lists[name].equals(traces[False].lists[name])
    assert "prompts_with_assistant_history" not in traces[False].meta.notes["import"]
    lines[0]["generation_logprobs"] = [["-0.25"]]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    line = import_fails(tmp_path, "nemo-rl", path, extra=("--max-tokens", str(BUDGET)))
    assert line == (
        f"Error: {path} line 1: field 'generation_logprobs' is not a list of numbers as long as "
        "'input_lengths'"
    )


def test_areal_multi_turn_prompt_ids_and_token_ids(tmp_path: Path, tokenizer_dir: Path) -> None:
    """`GroupedRolloutWorkflow` runs `MultiTurnWorkflow` n_samples times on one prompt (one
    task). A record's prompt text is its sequence cut at prompt_len, so a two-turn record's
    runs into its first output: at step 1 such a record heads its task, at step 2 a one-turn
    one does, and the prompt keeps its id. Its completion's ids are the sequence's tail (the
    retry message's tokens in, its output's start out), so --max-turns adds no token ids."""
    plan = {1: [[BUDGET, 7], [5], [4, 6], [9]], 2: [[5], [BUDGET, 7], [9], [4, 6]]}
    for step, episodes in plan.items():
        for p in range(2):
            write_areal_episodes(tmp_path / "log", step, step * 10 + p, p, episodes)
    extra = ("--max-tokens", str(BUDGET), "--max-turns", "2")
    trace, _ = import_ok(tmp_path, "areal", tmp_path / "log", extra=extra)
    df = trace.df
    assert trace.meta.group_size == 4 and len(df) == 16
    ids = df.groupby("step")["prompt_id"].apply(set).tolist()
    assert ids == [{stable_id(words(p)) for p in PROMPTS[:2]}] * 2
    assert not trace.has_tokens()
    tokens, said = import_said(tmp_path, "areal", tmp_path / "log", *extra, "--tokenizer", str(tokenizer_dir))
    assert not tokens.has_tokens()
    assert "token ids left out: a multi-turn record's texts (--max-turns) are cut at prompt_len" in said
    pd.testing.assert_frame_equal(tokens.df, df)


# --- verl and ROLL multi-turn: what their dumps cannot tell ------------------------------


def write_verl_multi_turn(root: Path) -> Path:
    """`{global_step}.jsonl` as v0.5.0's `_dump_generations` writes an sglang multi-turn
    rollout (`multi_turn.enable`, `_req_level_generate_sequences`): `output` decodes every
    turn, the tool's response between them included (response_mask 0, not dumped), and
    each line carries its request's `request_id` (uuid4). No `gts` before v0.6.0."""
    root.mkdir()
    lines = []
    for p in range(2):
        for k, turns in enumerate(TURNS):
            response: list[int] = []
            for t, n in enumerate(turns):
                response += ([70 + t, 71, 72] if t else []) + response_ids(k * 3 + t, n)
            lines.append(
                {
                    "input": words(PROMPTS[p]),
                    "output": words(response),
                    "score": float(k % 2),
                    "step": 1,
                    "request_id": f"8c6f0d7e-3b1a-4c55-9d2e-{p:04d}{k:08d}",
                }
            )
    (root / "1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return root


def test_verl_multi_turn_dumps_are_refused(tmp_path: Path, tokenizer_dir: Path) -> None:
    """verl never dumps response_mask or the turns, so a multi-turn response's decoded text
    holds the tool's tokens as if generated: v0.5.0's `request_id` (only the sglang
    multi-turn rollout sets it) and --max-turns above 1 are refused in one line;
    --max-turns 1 says no response took a second turn, and the text is read as one."""
    dump = write_verl_multi_turn(tmp_path / "rollout_data")
    extra = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(3 * BUDGET))
    line = import_fails(tmp_path, "verl", dump, extra=extra)
    assert line == (
        f"Error: {dump / '1.jsonl'} line 1: field 'request_id' marks verl's sglang multi-turn rollout "
        "(v0.5.0, multi_turn.enable), whose 'output' holds the tool and environment tokens between "
        "turns; pass --max-turns 1 if no response took a second turn"
    )
    plain = write_verl(tmp_path / "plain")
    for path in (dump, plain):
        line = import_fails(tmp_path, "verl", path, extra=(*extra, "--max-turns", "2"))
        assert line.startswith("Error: --max-turns 2: verl dumps of multi-turn rollouts cannot be imported: ")
        assert line.endswith(
            "neither response_mask nor the turns are dumped (--max-turns 1: every response is one turn)"
        )
    trace, said = import_said(tmp_path, "verl", dump, *extra, "--max-turns", "1")
    assert "8 responses of a multi-turn rollout read as one turn each (--max-turns 1)" in said
    df = trace.df
    assert trace.meta.group_size == 4 and len(df) == 8
    assert set(df["prompt_id"]) == {stable_id(words(p)) for p in PROMPTS[:2]}
    assert trace.meta.notes["import"]["read_as_one_turn"] == 8
    # (as the user said: the whole text, the tool's words in it, plus the EOS)
    assert sorted(df["response_len"]) == sorted(
        sum(t) + 3 * (len(t) - 1) + 1 for _ in range(2) for t in TURNS
    )
    assert (df["max_tokens"] == 3 * BUDGET).all() and (df["finish_reason"] == "stop").all()
    # a single-turn dump with --max-turns 1 imports as without it
    base = ("--tokenizer", str(tokenizer_dir), "--max-tokens", str(BUDGET))
    one, said = import_said(tmp_path, "verl", plain, *base, "--max-turns", "1")
    assert "--max-turns not used: no line is of verl's sglang multi-turn rollout (request_id)" in said
    pd.testing.assert_frame_equal(one.df, import_ok(tmp_path, "verl", plain, extra=base)[0].df)


def roll_agentic_columns(kind: str, n: int) -> dict[str, Any]:
    """One step's columns as `dump_rollout_trajectories` (roll/pipeline/agentic/utils.py,
    v0.2.0 on) hands them to the RLVR writer: the env manager's `COLUMMNS_CONFIG` columns,
    rows with a None dropped, then `global_step`. `native`: AgentNativeStepEnvManager's
    trajectory row; `proxy`: ProxyEnvManager's row per branch (v0.3.0 on)."""
    messages = [
        {"role": "system", "content": "w1"},
        {"role": "user", "content": words(PROMPTS[0])},
        {"role": "assistant", "content": words(response_ids(0, 5))},
        {"role": "tool", "content": "w70 w71 w72"},
        {"role": "assistant", "content": words(response_ids(1, 4))},
    ]
    if kind == "native":
        data = {
            "trajectory_id": "swe_0_1_0_0_0_42_20260101_000000_000000",
            "env_info": {"env_id": 0, "group_id": 0, "tag": "swe", "mode": "train", "max_steps": 8},
            "length_info": {"trajectory_length": 2, "num_actions": 2, "terminated": True, "truncated": False},
            "reward_info": {"episode_reward": 1.0, "step_rewards": [0.0, 1.0]},
            "failure_info": {"failure_mode": "", "stop_reason": "FINISH", "has_failure": False},
        }
        chat = json.dumps([messages])  # (all_messages: a list of chats)
    else:
        data = {
            "trajectory_id": "proxy_0_1_42_0_20260101_000000_000000",
            "num_actions": 2,
            "branch_or_step_idx": 0,
            "num_branches_or_steps": 1,
            "reward_info": {"episode_reward": 1.0, "step_reward": 1.0},
            "messages": messages,
            "finish_reason": "stop",
        }
        chat = json.dumps(messages)
    return {
        "trajectory_data": [json.dumps(data)] * n,
        "messages": [chat] * n,
        "tools": [json.dumps([{"type": "function", "function": {"name": "bash"}}])] * n,
        "exp_name": ["swe_agentic"] * n,
        "global_step": [3] * n,
    }


@pytest.mark.parametrize("kind", ["native", "proxy"])
def test_roll_agentic_dumps_are_refused_naming_what_they_lack(
    tmp_path: Path, tokenizer_dir: Path, kind: str
) -> None:
    """The agentic pipeline writes `rollout_dump_data.step_N.jsonl` too, through the same
    writer, but with its trajectory columns only: no responses, token ids or response mask,
    so its generated tokens cannot be told from the environment's."""
    root = tmp_path / "dump"
    root.mkdir()
    path = root / "rollout_dump_data.step_3.jsonl"
    path.write_text(json.dumps(roll_agentic_columns(kind, 4), ensure_ascii=False) + "\n")
    line = import_fails(tmp_path, "roll", root, extra=("--tokenizer", str(tokenizer_dir)))
    assert line == (
        f"Error: {path} line 1: a ROLL agentic pipeline dump (column 'trajectory_data'): it has no "
        "'responses', token ids or response_mask, so a trajectory's generated tokens cannot be told from "
        "the environment's; only the RLVR pipeline's dumps can be imported"
    )
