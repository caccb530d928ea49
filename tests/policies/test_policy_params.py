"""Typed policy parameters: every registered policy parses `name:key=value,...` against its
one declaration, reports resolved values through `Policy.params()`, and refuses anything
else with one `PolicySpecError` whose message is one line naming policy, key and value."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simctl.policies.draft_methods import DraftMethod
from simctl.policies.family import Family
from simctl.policies.params import (
    Flag,
    Float,
    Int,
    Kind,
    Method,
    OneOf,
    OrNone,
    ParamError,
    PolicySpecError,
    SlashList,
)
from simctl.policies.registry import REGISTRY, UnknownPolicyError, make_policy
from simctl.policies_cmd import policies_cmd

NAMES = sorted(REGISTRY)


@pytest.mark.parametrize(
    ("spec", "pieces"),
    [
        ("ngram:gamma=abc", ["'ngram'", "gamma='abc'", "not an integer", "integer 1..64"]),
        ("ngram:gamma=1.7", ["'ngram'", "gamma='1.7'", "not an integer", "integer 1..64"]),
        ("ngram:gamma=0", ["'ngram'", "gamma='0'", "out of range", "integer 1..64"]),
        ("tlt:pretrained=maybe", ["'tlt'", "pretrained='maybe'", "not a boolean", "yes/no"]),
        ("seer:chunk_tokens=0", ["'seer'", "chunk_tokens='0'", "out of range"]),
        ("seer:foo=1", ["'seer'", "foo='1'", "unknown parameter", "chunk_tokens", "tick_iterations"]),
        ("ngram:gamma=4,gamma=5", ["'ngram'", "gamma", "'4'", "'5'", "twice"]),
        ("ngram:gamma=4,gamma=4", ["'ngram'", "gamma", "twice"]),
        ("composite:fon-max-batch=2,fon_max_batch=3", ["'composite'", "fon_max_batch", "twice"]),
        ("efficientrollout:epsilon=nan", ["'efficientrollout'", "epsilon='nan'", "not a finite number"]),
        ("efficientrollout:alpha_up=inf", ["'efficientrollout'", "alpha_up='inf'", "not a finite number"]),
        ("efficientrollout:gammas=5/x", ["'efficientrollout'", "gammas='5/x'", "'x'", "integer 1..64"]),
        ("composite:methods=suffix/bogus", ["'composite'", "methods='suffix/bogus'", "'bogus'", "eagle"]),
        ("composite:methods=suffix/suffix", ["'composite'", "methods='suffix/suffix'", "twice"]),
        ("composite:ordering=lifo", ["'composite'", "ordering='lifo'", "fifo/context/oracle"]),
        ("composite-fixed-drafter:methods=eagle", ["'composite-fixed-drafter'", "fixed='suffix'", "eagle"]),
        ("composite:methods=eagle,fixed=suffix", ["'composite'", "fixed='suffix'", "among methods"]),
        ("ngram:gamma", ["'ngram'", "'gamma'", "not key=value"]),
        ("ngram:=4", ["'ngram'", "''", "unknown parameter"]),
        ("nope:gamma=4", ["unknown policy 'nope'", "ngram", "verl"]),
        ("seer:chunk_tokens=1\n2", ["'seer'", "chunk_tokens='1\\n2'"]),
    ],
)
def test_every_error_is_one_line_naming_policy_key_and_value(spec: str, pieces: list[str]) -> None:
    with pytest.raises(PolicySpecError) as info:
        make_policy(spec)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    for piece in pieces:
        assert piece in message, (piece, message)
    assert isinstance(info.value, UnknownPolicyError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("text", ["true", "TRUE", "Yes", "1", "false", "No", "0", "fAlSe"])
def test_booleans_take_only_the_six_spellings_in_any_case(text: str) -> None:
    assert make_policy(f"tlt:pretrained={text}").params()["pretrained"] is (
        text.lower() in ("true", "yes", "1")
    )


@pytest.mark.parametrize("text", ["2", "y", "on", "t", ""])
def test_other_boolean_spellings_are_refused(text: str) -> None:
    with pytest.raises(PolicySpecError, match="pretrained"):
        make_policy(f"tlt:pretrained={text}")


@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_the_declared_ones_and_the_name_is_the_family(name: str) -> None:
    policy = make_policy(name)
    assert policy.name == name
    declared = REGISTRY[name].declared()
    assert policy.params() == {d.name: d.kind.to_json(d.default) for d in declared}


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_default_is_a_value_a_user_could_give(name: str) -> None:
    for d in REGISTRY[name].declared():
        d.kind.parse(d.default_text)  # (raises ParamError where the default is refused)


@pytest.mark.parametrize(
    ("kind", "default", "said"),
    [
        (Int(1, 8), 0, "out of range"),
        (Int(1, 8), 2.5, "not an integer"),
        (Float(0.0, 1.0), 1.5, "out of range"),
    ],
)
def test_a_default_outside_its_own_declaration_is_refused_in_one_line(
    kind: Kind, default: object, said: str
) -> None:
    """A plug-in's declaration whose default its own kind refuses: the policy would run with
    a value no user could give it; refused when the policy is made, naming it."""
    from typing import Annotated

    from simctl.policies.params import Param, PolicyParams

    field = dataclasses.make_dataclass(
        "Declared",
        [("k", Annotated[type(default), Param(kind, "k")], default)],
        bases=(PolicyParams,),
        frozen=True,
    )
    family = Family("mine", "a plug-in", field, lambda _n, _p: make_policy("verl"))
    with pytest.raises(PolicySpecError) as err:
        family.make("")
    text = str(err.value)
    assert "\n" not in text and text.startswith("policy 'mine': its default k=") and said in text
    family.make("k=1")  # (given, the default is not used)


@pytest.mark.parametrize("text", [str(2**63), str(-(2**63) - 1), "99999999999999999999"])
def test_an_unbounded_integer_stays_within_64_bits(text: str) -> None:
    """Tables (run.json, sweep.parquet) hold 64-bit integers: a seed beyond them ran every
    sweep point and then failed writing the table."""
    with pytest.raises(PolicySpecError, match=r"out of range \(allowed: integer within 64 bits"):
        make_policy(f"seer:seed={text}")
    assert make_policy(f"seer:seed={2**63 - 1}").params()["seed"] == 2**63 - 1


def test_spellings_valid_before_keep_working() -> None:
    # dashes for underscores, ";" in the draft-length set, an empty value for "no method"
    assert make_policy("composite:fon-max-batch=2").params()["fon_max_batch"] == 2
    assert make_policy("efficientrollout:gammas=7;5").params()["gammas"] == [5, 7]
    assert make_policy("composite-fixed-drafter:fixed=").params()["fixed"] is None
    assert make_policy("speactor-vanilla:decoupled=true").params()["decoupled"] is True
    assert make_policy("ngram:,gamma=6,").params() == {"gamma": 6}
    policy = make_policy("ngram:gamma=6")
    assert policy.name == "ngram:gamma=6" and policy.parts[1].spec.gamma == 6  # type: ignore[attr-defined]
    assert make_policy("seer-divided:tick_iterations=5").params()["tick_iterations"] == 5


def test_variant_defaults_differ_where_the_variant_says() -> None:
    assert make_policy("composite-no-fon").params()["fon"] is False
    assert make_policy("speactor-vanilla").params()["reconfig"] is False
    assert make_policy("tlt-static-drafter").params()["pretrained"] is True
    assert make_policy("tlt-static-drafter").parts[1].ledger.pretrained  # type: ignore[attr-defined]


# ------------------------------------------------------------------------ hypothesis


def values_of(kind: Kind) -> st.SearchStrategy[Any]:
    """Values a kind allows, drawn from its declared range or choices."""
    if isinstance(kind, Int):
        return st.integers(*kind.bounds)
    if isinstance(kind, Float):
        return st.floats(
            kind.lo,
            kind.hi,
            exclude_min=kind.lo_open and kind.lo is not None,
            exclude_max=kind.hi_open and kind.hi is not None,
            allow_nan=False,
            allow_infinity=False,
        )
    if isinstance(kind, Flag):
        return st.booleans()
    if isinstance(kind, OneOf):
        return st.sampled_from(kind.choices)
    if isinstance(kind, Method):
        return st.sampled_from(list(DraftMethod))
    if isinstance(kind, OrNone):
        return st.none() | values_of(kind.kind)
    if isinstance(kind, SlashList):
        items = st.lists(values_of(kind.item), min_size=1, max_size=6, unique=True)
        return items.map(lambda v: tuple(sorted(v)) if kind.canonical else tuple(v))
    raise AssertionError(f"no strategy for {kind!r}")


@st.composite
def family_and_values(draw: st.DrawFn) -> tuple[Family[Any], dict[str, Any]]:
    fam = REGISTRY[draw(st.sampled_from(NAMES))]
    declared = fam.declared()
    chosen = draw(st.lists(st.sampled_from(declared), unique_by=lambda d: d.name)) if declared else []
    return fam, {d.name: draw(values_of(d.kind)) for d in chosen}


@settings(max_examples=400, deadline=None)
@given(family_and_values())
def test_values_drawn_from_the_declarations_build_and_are_reported(case: tuple[Family[Any], dict]) -> None:
    fam, values = case
    try:  # a check relating two fields (fixed among methods) may refuse the combination
        dataclasses.replace(fam.params(), **{**fam.defaults, **values})
    except ParamError:
        assume(False)
    kinds = {d.name: d.kind for d in fam.declared()}
    spec = fam.name + ":" + ",".join(f"{k}={kinds[k].format(v)}" for k, v in values.items())
    params = make_policy(spec).params()
    for key, value in values.items():
        assert params[key] == kinds[key].to_json(value), (spec, key)
    defaults = {d.name: d.kind.to_json(d.default) for d in fam.declared()}
    assert {k: v for k, v in params.items() if k not in values} == {
        k: v for k, v in defaults.items() if k not in values
    }


KEYS = sorted({d.name for fam in REGISTRY.values() for d in fam.declared()} | {"foo", "gamma-0", ""})
garbage = st.one_of(
    st.text(),
    st.builds(lambda n, t: f"{n}:{t}", st.sampled_from(NAMES), st.text()),
    st.builds(
        lambda n, kvs: n + ":" + ",".join(f"{k}={v}" for k, v in kvs),
        st.sampled_from(NAMES),
        st.lists(
            st.tuples(st.sampled_from(KEYS), st.text(alphabet=st.characters(), max_size=12)), max_size=4
        ),
    ),
    st.builds(
        lambda n, k, v: f"{n}:{k}={v}",
        st.sampled_from(NAMES),
        st.sampled_from(KEYS),
        st.sampled_from(
            ["", "nan", "-inf", "1e400", "1_0", "0x10", " 7 ", "-1", "99999999999999999999", "none"]
        )
        | st.from_regex(r"[0-9a-z./;_+-]{0,10}", fullmatch=True),
    ),
)


@settings(max_examples=600, deadline=None)
@given(garbage)
def test_garbage_specs_raise_nothing_but_the_one_error(spec: str) -> None:
    try:
        make_policy(spec)
    except PolicySpecError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc)


# ------------------------------------------------------------------------ the command


def test_simctl_policies_lists_every_policy_with_its_defaults() -> None:
    out = CliRunner().invoke(policies_cmd, [])
    assert out.exit_code == 0
    for name in NAMES:
        assert f"\n{name} " in "\n" + out.output
    assert "gamma=4" in out.output and "fon=false" in out.output


def test_simctl_policies_name_shows_type_default_allowed_and_help() -> None:
    out = CliRunner().invoke(policies_cmd, ["ngram"])
    assert out.exit_code == 0
    assert "gamma (int, default 4): draft tokens per iteration" in out.output
    assert "allowed: integer 1..64" in out.output
    assert "no parameters" in CliRunner().invoke(policies_cmd, ["verl"]).output


def test_simctl_policies_unknown_name_is_one_line_and_fails() -> None:
    out = CliRunner().invoke(policies_cmd, ["nope"])
    assert out.exit_code != 0
    assert out.output.count("\n") == 1 and "unknown policy 'nope'" in out.output


# ------------------------------------------------------------------------ structure


def test_no_policy_module_imports_the_registry() -> None:
    """The registry collects the families; a policy module importing it is a cycle."""
    folder = Path(make_policy.__code__.co_filename).parent
    for path in folder.glob("*.py"):
        if path.name == "registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                assert not any(n.endswith("policies.registry") for n in names), path.name
