"""Policies from outside the package: `--policy module.path:Class[:key=value,...]`,
`--policy path/to/file.py:Class[:key=value,...]`, and the `simctl.policies` entry-point
group of installed distributions.

Every executor and command resolves a policy spec through `make_policy` here: a spec
whose first part names a module path (it has a dot) or a file (it ends in `.py` or has a
`/`) is loaded as a plug-in class; any other name is a built-in policy
(`policies/registry.py`) or, failing that, an entry point of the `simctl.policies` group.

Why here. Loading code (importing a module or a file, reading installed distributions'
entry points) is I/O, and `policies/` stays free of it; the registry keeps only the
built-in families. The callers are `sim/replay.py`, `live/session.py` and `simctl/*`
(layer order policies -> traces -> sim -> live -> reports -> simctl), and the sweep's
tasks, which receive spec strings in other processes; so the loader sits in the lowest
layer allowed I/O, `traces/`, which every caller may import, and resolves a spec string
wherever it is run (no registration step that a Ray task could miss).

A plug-in class is a `Policy` subclass. It may declare typed parameters as built-ins do
(`policies/params.py`): a class attribute `params_type` naming a frozen `PolicyParams`
dataclass; the class is then built as `Class(params)`, else as `Class()` and it takes no
parameters. Its policy name is its `name` attribute (the class name where it keeps
`Policy.name`); with parameters, `name:key=value,...`. An entry point names such a class
(or a `policies.family.Family`); its entry-point name is the policy's name.

Every problem (module or file not found, no such class, not a Policy subclass, the import
raised, a parameter refused) is a `PolicySpecError` of one line naming the spec.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, is_dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from simctl.policies.contract import FILE_PLUGIN_PREFIX, Policy
from simctl.policies.family import Family, NoParams
from simctl.policies.params import PolicyParams, PolicySpecError, quote
from simctl.policies.registry import REGISTRY
from simctl.traces.paths import user_path

#: The entry-point group installed distributions declare their policies in.
ENTRY_POINT_GROUP = "simctl.policies"

# a file plug-in is executed once per process and content: a notebook that edits the file
# and replays again gets the edited policy (it kept the first version's, silently)
_FILE_MODULES: dict[tuple[Path, str], ModuleType] = {}
_ENTRY_FAMILIES: dict[str, Family[Any]] = {}


def is_plugin_spec(spec: str) -> bool:
    """True for `module.path:Class...` and `file.py:Class...`: the first part has a dot or
    a slash, or it is no policy's name and the second part is a bare name (a policy's
    parameters are `key=value` items).

    >>> is_plugin_spec("ngram:gamma=4"), is_plugin_spec("pkg.mod:Cls"), is_plugin_spec("mod:Cls:x=1")
    (False, True, True)
    """
    head, _, rest = spec.partition(":")
    second = rest.split(":", 1)[0]
    if "." in head or "/" in head or "\\" in head:
        return True
    return second.isidentifier() and head not in REGISTRY and head not in _entry_point_names()


def plugin_file(spec: str) -> str | None:
    """The file of a `file.py:Class[:args]` spec (its first part ends in .py or is a path),
    None for anything else (a built-in name, `module.path:Class`).

    >>> plugin_file("policies/mine.py:Mine:gamma=4"), plugin_file("pkg.mod:Cls"), plugin_file("ngram:gamma=4")
    ('policies/mine.py', None, None)
    """
    head, sep, _ = spec.partition(":")
    return head if sep and (head.endswith(".py") or "/" in head or "\\" in head) else None


def _entry_point_names() -> set[str]:
    return {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _load_file(path: Path, spec: str) -> ModuleType:
    resolved = user_path(path).resolve()
    if not resolved.is_file():
        raise PolicySpecError(f"policy {quote(spec)}: no such file {quote(str(path))}")
    try:
        content = hashlib.sha256(resolved.read_bytes()).hexdigest()
    except OSError as exc:
        problem = f"cannot read {quote(str(path))} ({exc.strerror})"
        raise PolicySpecError(f"policy {quote(spec)}: {problem}") from None
    key = (resolved, content)
    if key in _FILE_MODULES:
        return _FILE_MODULES[key]
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    name = f"{FILE_PLUGIN_PREFIX}{digest}_{''.join(c if c.isalnum() else '_' for c in resolved.stem)}"
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise PolicySpecError(f"policy {quote(spec)}: {quote(str(path))} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and typing look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # (sys.exit at import is the file's error too)
        del sys.modules[name]
        raise PolicySpecError(f"policy {quote(spec)}: loading {path} raised {_first_line(exc)}") from None
    _FILE_MODULES[key] = module
    return module


def _load_module(dotted: str, spec: str) -> ModuleType:
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and (dotted == exc.name or dotted.startswith(exc.name + ".")):
            raise PolicySpecError(f"policy {quote(spec)}: no module named {quote(exc.name)}") from None
        raise PolicySpecError(f"policy {quote(spec)}: importing {dotted} raised {_first_line(exc)}") from None
    except (Exception, SystemExit) as exc:
        raise PolicySpecError(f"policy {quote(spec)}: importing {dotted} raised {_first_line(exc)}") from None


def _described(obj: object) -> str:
    """What a plug-in spec named, by its name where it has one (a class, a function), else
    by its type: never by its repr, which may be pages long, span lines or raise."""
    try:
        name = getattr(obj, "__name__", None)
    except Exception:  # (an object whose attribute lookup raises)
        name = None
    if isinstance(name, str) and name:
        return name[:80] if name.isidentifier() else quote(name[:80])
    return f"a {type(obj).__name__} object"


def class_family(cls: object, name: str | None, where: str) -> Family[Any]:
    """The family of plug-in class `cls` (named `name`, default its policy name); `where`
    names it in errors."""
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PolicySpecError(
            f"policy {quote(where)}: {_described(cls)} is not a Policy subclass "
            "(simctl.policies.contract.Policy)"
        )
    params = getattr(cls, "params_type", None)
    if params is not None and not (
        isinstance(params, type) and issubclass(params, PolicyParams) and is_dataclass(params)
    ):
        raise PolicySpecError(
            f"policy {quote(where)}: {cls.__name__}.params_type is not a PolicyParams dataclass"
        )
    make: Callable[..., Policy] = cls  # a user's class: its __init__ takes the parameters
    own = cls.name if cls.name != Policy.name else cls.__name__
    doc = (cls.__doc__ or "").strip().splitlines()
    help_text = doc[0] if doc else f"plug-in {cls.__module__}.{cls.__name__}"

    def build(_name: str, p: PolicyParams) -> Policy:
        try:
            policy = make(p) if params is not None else make()
        except (Exception, SystemExit) as exc:
            raise PolicySpecError(
                f"policy {quote(where)}: {cls.__name__}() raised {_first_line(exc)}"
            ) from None
        policy.name = name or own
        return policy

    return Family(name or own, help_text, params or NoParams, build)


def _plugin_family(spec: str) -> tuple[Family[Any], str]:
    """(family, key=value text) of a `module:Class[:args]` or `file.py:Class[:args]` spec."""
    head, _, rest = spec.partition(":")
    cls_name, _, arg_text = rest.partition(":")
    if not cls_name or not cls_name.isidentifier():
        raise PolicySpecError(f"policy {quote(spec)}: expected module.path:Class or file.py:Class")
    module = _load_file(Path(head), spec) if plugin_file(spec) else _load_module(head, spec)
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise PolicySpecError(f"policy {quote(spec)}: {head} has no class {quote(cls_name)}")
    return class_family(cls, None, spec), arg_text


@dataclass(frozen=True)
class EntryPointInfo:
    """An installed distribution's policy: its name and where it comes from."""

    name: str
    value: str
    dist: str


def entry_point_policies() -> list[EntryPointInfo]:
    """The `simctl.policies` entry points installed (not loaded), by name."""
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        found.append(EntryPointInfo(ep.name, ep.value, dist))
    return sorted(found, key=lambda e: e.name)


def entry_point_family(name: str) -> Family[Any] | None:
    """The family of entry point `name` (loaded once), None where none is installed."""
    if name in _ENTRY_FAMILIES:
        return _ENTRY_FAMILIES[name]
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        return None
    ep = matches[0]
    where = f"{name} (entry point {ep.value})"
    try:
        obj = ep.load()
    except (Exception, SystemExit) as exc:
        raise PolicySpecError(f"policy {quote(where)}: loading raised {_first_line(exc)}") from None
    fam = obj if isinstance(obj, Family) else class_family(obj, name, where)
    _ENTRY_FAMILIES[name] = fam
    return fam


def known_names() -> list[str]:
    """Built-in and installed policy names."""
    return sorted({*REGISTRY, *(e.name for e in entry_point_policies())})


def family(name: str) -> Family[Any]:
    """The family runnable as `name`: built-in, else an installed entry point."""
    found = REGISTRY.get(name) or entry_point_family(name)
    if found is None:
        raise PolicySpecError(f"unknown policy {quote(name)}; known: {', '.join(known_names())}")
    return found


def resolve(spec: str) -> tuple[Family[Any], str]:
    """(family, key=value text) of any policy spec."""
    if is_plugin_spec(spec):
        return _plugin_family(spec)
    name, _, arg_text = spec.partition(":")
    return family(name), arg_text


def make_policy(spec: str) -> Policy:
    """Build the policy of `spec`: `name[:k=v,...]`, `module.path:Class[:k=v,...]` or
    `file.py:Class[:k=v,...]`; a spec with parameters names the policy with them."""
    fam, arg_text = resolve(spec)
    if not is_plugin_spec(spec):
        policy = fam.make(arg_text)
        if arg_text:
            policy.name = spec
        return policy
    try:
        policy = fam.make(arg_text)
    except PolicySpecError as exc:  # named by the spec the user wrote, not the class's name
        raise PolicySpecError(
            str(exc).replace(f"policy {quote(fam.name)}:", f"policy {quote(spec)}:", 1)
        ) from None
    if arg_text:
        policy.name = f"{policy.name}:{arg_text}"
    return policy
