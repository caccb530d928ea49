"""Typed policy parameters: what `name:key=value,...` may say, declared once per policy.

A policy family declares its parameters as one frozen dataclass derived from
`PolicyParams`, each field typed `Annotated[type, Param(kind, help)]` with its default.
The *kind* reads the command-line text and says what it allows (`Int(1, 64)` is "integer
1..64"), so parsing, the error a user sees, `simctl policies NAME` and the resolved values
a run records (`Policy.params()`) all come from that one declaration. Checks that relate
two fields go in the dataclass's `__post_init__` and raise `ParamError`.

Every problem is a `PolicySpecError` (a `ValueError`) whose message is one line naming the
policy, the parameter, the value given and what is allowed:

>>> Int(1, 64).parse("1.7")
Traceback (most recent call last):
...
simctl.policies.params.ParamError: is not an integer
>>> Flag().parse("Yes"), Int(1, 64).allowed
(True, 'integer 1..64')

Pure data: no simulator, torch or I/O (the declarations run in both executors).
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from simctl.policies.draft_methods import DraftMethod

_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


class PolicySpecError(ValueError):
    """A policy spec (`name:key=value,...`) that names no policy or breaks a declaration.
    The message is one line (values are quoted with their escapes)."""


class ParamError(ValueError):
    """A value a kind or a cross-field check refuses: `str(self)` is the reason ("is not
    an integer"); `key` and `allowed` are set where the check knows better than the
    caller (a cross-field check names the field it blames)."""

    def __init__(self, reason: str, key: str | None = None, allowed: str | None = None) -> None:
        super().__init__(reason)
        self.key = key
        self.allowed = allowed


# ------------------------------------------------------------------------------- kinds


class Kind(ABC):
    """How one parameter's text is read, and what it allows (for messages and listings)."""

    #: Short type name for `simctl policies NAME`.
    type_name: ClassVar[str] = "value"

    @property
    def type_text(self) -> str:
        """The type in words for listings ("int", "method list")."""
        return self.type_name

    @abstractmethod
    def parse(self, text: str) -> object:
        """The value of `text`; raises ParamError with the reason it is refused."""

    @property
    @abstractmethod
    def allowed(self) -> str:
        """What the kind accepts, in words ("integer 1..64")."""

    def format(self, value: object) -> str:
        """`value` as command-line text that `parse` reads back."""
        return str(value)

    def to_json(self, value: object) -> object:
        """`value` as recorded in run.json (plain JSON types)."""
        return value


def _range_text(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None and not lo_open and not hi_open:
        return f"{lo}..{hi}"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi}")
    return " and ".join(parts)


@dataclass(frozen=True)
class Int(Kind):
    """A decimal integer (no fraction, no exponent) in lo..hi (None: unbounded)."""

    lo: int | None = None
    hi: int | None = None
    type_name: ClassVar[str] = "int"

    def parse(self, text: str) -> int:
        if not _INTEGER.fullmatch(text):
            raise ParamError("is not an integer")
        value = int(text)
        lo, hi = self.bounds
        if value < lo or value > hi:
            raise ParamError("is out of range")
        return value

    @property
    def bounds(self) -> tuple[int, int]:
        """The declared bounds within a signed 64-bit integer: every value is recorded in
        tables (run.json, sweep.parquet) whose integer columns hold no more."""
        lo = INT64_MIN if self.lo is None else max(self.lo, INT64_MIN)
        hi = INT64_MAX if self.hi is None else min(self.hi, INT64_MAX)
        return lo, hi

    @property
    def allowed(self) -> str:
        lo, hi = self.bounds
        bounds = _range_text(None if lo == INT64_MIN else lo, None if hi == INT64_MAX else hi)
        if self.lo is None and self.hi is None:
            return "integer within 64 bits"
        return f"integer {bounds}"


@dataclass(frozen=True)
class Float(Kind):
    """A finite number (nan and inf only where `nonfinite`) within the bounds given."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    nonfinite: bool = False
    type_name: ClassVar[str] = "float"

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ParamError("is not a number") from None
        if not math.isfinite(value):
            if not self.nonfinite:
                raise ParamError("is not a finite number")
            if math.isnan(value):
                return value
        if not self._within(value):
            raise ParamError("is out of range")
        return value

    def _within(self, value: float) -> bool:
        lo, hi = self.lo, self.hi
        if lo is not None and (value < lo or (self.lo_open and value == lo)):
            return False
        return not (hi is not None and (value > hi or (self.hi_open and value == hi)))

    @property
    def allowed(self) -> str:
        bounds = _range_text(self.lo, self.hi, self.lo_open, self.hi_open)
        kind = "number" if self.nonfinite else "finite number"
        return f"{kind} {bounds}" if bounds else kind

    def format(self, value: object) -> str:
        return repr(float(value)) if isinstance(value, int | float) else str(value)


@dataclass(frozen=True)
class Flag(Kind):
    """A boolean: true/false, yes/no or 1/0, in any case."""

    type_name: ClassVar[str] = "bool"

    def parse(self, text: str) -> bool:
        value = _BOOLS.get(text.lower())
        if value is None:
            raise ParamError("is not a boolean")
        return value

    @property
    def allowed(self) -> str:
        return "true/false, yes/no or 1/0"

    def format(self, value: object) -> str:
        return "true" if value else "false"


@dataclass(frozen=True)
class OneOf(Kind):
    """One of a fixed set of words (exact spelling)."""

    choices: tuple[str, ...]
    type_name: ClassVar[str] = "choice"

    def parse(self, text: str) -> str:
        if text not in self.choices:
            raise ParamError("is not a choice")
        return text

    @property
    def allowed(self) -> str:
        return "one of " + "/".join(self.choices)


@dataclass(frozen=True)
class Method(Kind):
    """A drafting method's name (`DraftMethod`)."""

    type_name: ClassVar[str] = "method"

    def parse(self, text: str) -> DraftMethod:
        try:
            return DraftMethod(text)
        except ValueError:
            raise ParamError("is not a draft method") from None

    @property
    def allowed(self) -> str:
        return "one of " + "/".join(m.value for m in DraftMethod)

    def to_json(self, value: object) -> object:
        return str(value)


@dataclass(frozen=True)
class OrNone(Kind):
    """`kind`, or nothing: an empty value or "none"."""

    kind: Kind
    type_name: ClassVar[str] = "optional"

    def parse(self, text: str) -> object:
        if text.lower() in ("", "none"):
            return None
        return self.kind.parse(text)

    @property
    def allowed(self) -> str:
        return f"{self.kind.allowed}, or none"

    @property
    def type_text(self) -> str:
        return f"{self.kind.type_text} or none"

    def format(self, value: object) -> str:
        return "none" if value is None else self.kind.format(value)

    def to_json(self, value: object) -> object:
        return None if value is None else self.kind.to_json(value)


@dataclass(frozen=True)
class SlashList(Kind):
    """Items of `item` separated by "/" (commas separate parameters on the command line),
    at least one, no item twice. `canonical` sorts them (a set written as a list); `also`
    names further separators accepted for older spellings."""

    item: Kind
    canonical: bool = False
    also: str = ""
    type_name: ClassVar[str] = "list"

    def parse(self, text: str) -> tuple[object, ...]:
        for sep in self.also:
            text = text.replace(sep, "/")
        words = text.split("/")
        if self.canonical:  # a set: empty items (a trailing "/") are nothing
            words = [w for w in words if w.strip()]
        if not words or any(not w for w in words):
            raise ParamError("is not a '/'-separated list")
        values: list[object] = []
        for w in words:
            try:
                v = self.item.parse(w.strip() if self.canonical else w)
            except ParamError as exc:
                raise ParamError(f"has an item {w!r} that {exc}") from None
            if v in values and not self.canonical:
                raise ParamError(f"lists {w!r} twice")
            if v not in values:
                values.append(v)
        return tuple(sorted(values, key=_number)) if self.canonical else tuple(values)

    @property
    def type_text(self) -> str:
        return f"{self.item.type_text} list"

    @property
    def allowed(self) -> str:
        order = "sorted, " if self.canonical else ""
        return f"'/'-separated list ({order}no repeats) of {self.item.allowed}"

    def format(self, value: object) -> str:
        return "/".join(self.item.format(v) for v in _items(value))

    def to_json(self, value: object) -> object:
        return [self.item.to_json(v) for v in _items(value)]


def _items(value: object) -> tuple[object, ...]:
    if not isinstance(value, tuple | list):
        raise TypeError(f"a list parameter holds {value!r}")
    return tuple(value)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


# ------------------------------------------------------------------------ declarations


@dataclass(frozen=True)
class Param:
    """A declared parameter's kind and one line of help: the metadata of its field's
    `Annotated` type, e.g. `gamma: Annotated[int, Param(Int(1, 64), "draft tokens")] = 4`."""

    kind: Kind
    help: str


@dataclass(frozen=True)
class Declared:
    """One field of a declaration, with the default a family gives it."""

    name: str
    kind: Kind
    help: str
    default: object

    @property
    def default_text(self) -> str:
        return self.kind.format(self.default)


_PARAMS: dict[type, tuple[tuple[str, Param, object], ...]] = {}  # class -> its fields' declarations


def _params_of(cls: type[PolicyParams]) -> tuple[tuple[str, Param, object], ...]:
    got = _PARAMS.get(cls)
    if got is None:
        got = _PARAMS[cls] = _read_params(cls)
    return got


def _read_params(cls: type[PolicyParams]) -> tuple[tuple[str, Param, object], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        meta = [m for m in getattr(hints[f.name], "__metadata__", ()) if isinstance(m, Param)]
        if len(meta) != 1 or f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} needs a default and one Param in its Annotated type")
        out.append((f.name, meta[0], f.default))
    return tuple(out)


@dataclass(frozen=True)
class PolicyParams:
    """Base of every family's parameter declaration (no parameters of its own)."""

    @classmethod
    def declared(cls, defaults: Mapping[str, object] | None = None) -> tuple[Declared, ...]:
        """The fields in declaration order, with `defaults` overriding the declared ones."""
        given = defaults or {}
        return tuple(
            Declared(name, p.kind, p.help, given.get(name, default)) for name, p, default in _params_of(cls)
        )

    def as_dict(self) -> dict[str, object]:
        """Resolved values as plain JSON types (what run.json records)."""
        return {name: p.kind.to_json(getattr(self, name)) for name, p, _ in _params_of(type(self))}


def names(declared: Sequence[Declared]) -> str:
    """The parameters' names for messages ("none" for none)."""
    return ", ".join(d.name for d in declared) or "none"


def quote(text: str) -> str:
    """`text` quoted on one line: control characters and line breaks escaped."""
    return repr(text)
