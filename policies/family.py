"""A policy family: what `simctl replay --policy NAME:key=value,...` can run under one name.

A family is a name, one line of help, its parameter declaration (a `PolicyParams`
dataclass, `policies/params.py`), the defaults it gives some of those parameters (variants
of one policy share a declaration and differ in defaults: `composite-no-fon` is
`composite` with `fon` false) and a builder from resolved parameters to a policy object.
Each policy module lists its families in a `FAMILIES` tuple; `policies/registry.py`
collects them, so no policy module imports the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from simctl.policies.contract import Policy
from simctl.policies.params import Declared, ParamError, PolicyParams, PolicySpecError, names, quote

P = TypeVar("P", bound=PolicyParams)


@dataclass(frozen=True)
class Family(Generic[P]):
    """One runnable policy name (see the module docstring)."""

    name: str
    help: str
    params: type[P]
    build: Callable[[str, P], Policy]
    defaults: Mapping[str, object] = field(default_factory=dict)

    def declared(self) -> tuple[Declared, ...]:
        """The family's parameters, with its own defaults."""
        return self.params.declared(dict(self.defaults))

    def resolve(self, arg_text: str) -> P:
        """The parameters of `key=value,key=value` (empty items are skipped, `-` in a key
        stands for `_`), every one not given at its default; PolicySpecError otherwise."""
        declared = {d.name: d for d in self.declared()}
        given: dict[str, str] = {}
        values: dict[str, object] = dict(self.defaults)
        for item in filter(None, arg_text.split(",")):
            key, eq, text = item.partition("=")
            if not eq:
                raise self.error(f"parameter {quote(item)} is not key=value")
            key, text = key.strip().replace("-", "_"), text.strip()
            d = declared.get(key)
            if d is None:
                known = names(tuple(declared.values()))
                shown = key if key.isidentifier() and key.isascii() else quote(key)
                raise self.error(f"unknown parameter {shown}={quote(text)} (known: {known})")
            if key in given:
                raise self.error(f"{key} given twice ({quote(given[key])} and {quote(text)})")
            given[key] = text
            try:
                values[key] = d.kind.parse(text)
            except ParamError as exc:
                raise self.error(f"{key}={quote(text)} {exc} (allowed: {d.kind.allowed})") from None
        self._check_defaults(declared, given)
        try:
            return dataclasses.replace(self.params(), **values)
        except ParamError as exc:  # a check relating two fields
            key = exc.key or "?"
            d = declared.get(key)
            text = given.get(key, d.default_text if d is not None else "")
            allowed = exc.allowed or (d.kind.allowed if d is not None else "?")
            raise self.error(f"{key}={quote(text)} {exc} (allowed: {allowed})") from None

    def _check_defaults(self, declared: Mapping[str, Declared], given: Mapping[str, str]) -> None:
        """Refuse a default its own kind refuses (a plug-in's `Int(1, 8)` defaulting to 0,
        an int field defaulting to 2.5): the policy would run with a value no user could
        give it. Read back from its text, as a given value is."""
        for name, d in declared.items():
            if name in given:
                continue
            try:
                d.kind.parse(d.default_text)
            except (ParamError, TypeError, ValueError) as exc:
                raise self.error(
                    f"its default {name}={quote(str(d.default))} {exc} (allowed: {d.kind.allowed})"
                ) from None

    def make(self, arg_text: str = "") -> Policy:
        """The policy with parameters `arg_text`; it records them (`Policy.params()`)."""
        params = self.resolve(arg_text)
        policy = self.build(self.name, params)
        policy.parameters = params
        return policy

    def error(self, problem: str) -> PolicySpecError:
        return PolicySpecError(f"policy {quote(self.name)}: {problem}")


@dataclass(frozen=True)
class NoParams(PolicyParams):
    """The declaration of a policy without parameters."""


def without_params(name: str, help: str, factory: Callable[[], Policy]) -> Family[NoParams]:
    """A family without parameters from a factory of no arguments."""
    return Family(name, help, NoParams, lambda _name, _params: factory())
