"""The sweep spec: a TOML file (data only, never code) naming the design space of `simctl sweep`.

::

    [sweep]
    traces = ["traces/samples/efficientrollout-qwen7b-8k-6steps.parquet"]
    steps = "0:2"                  # or a list: ["0:2", "2:4"]; default every step
    clusters = ["a100x8:tp1"]      # default ["trace"]: each trace's recorded layout, else h100x512
    models = ["trace", "gpt-oss-120b"]  # optional: targets to replay with ("trace": its own)
    max_num_seqs = [64, 256]       # engine batch limit per worker; default [256] (vLLM's)
    profile = "h100-qwen7b.json"   # optional: measured costs (`simctl calibrate`), not the roofline;
                                   # or a list, one per TP and model: ["tp1.json", "tp2.json"]
    seeds = [0, 1]                 # default [0]
    zip = [["traces", "steps"]]    # optional: these axes advance together (not crossed)

    [policies]
    verl = {}
    ngram = { gamma = [2, 4, 6] }
    spec-coupled = { method = ["ngram", "suffix"], gamma = [2, 4], zip = [["method", "gamma"]] }
    seer = [{}, { chunk_tokens = [4096, 16384] }]   # a list of grids: their union

Every axis is the cross product of its values, except the axes of one `zip` group, which
advance together (their lists must be equally long). A list is always a grid, so a
list-valued parameter is given as its command-line text ("ngram/suffix"). Relative trace,
cluster and model files resolve against the spec file's folder, then the current directory.
A model is a catalogue name or a HF config (a directory holding config.json, or the file),
as `simctl replay --model` takes; its architecture is read once and travels with each task
as data (`model_record`), so nodes of a joined Ray cluster need not see the file.
`max_num_seqs` is the engine's batch limit per worker, as `simctl replay --max-num-seqs`
sets it: the knob that decides the batch sizes where speculation pays, so a design is
swept against it like a policy parameter. `profile` prices every point with a measured
cost profile, as `simctl replay --profile` does. One file prices every point and must fit
every cluster's TP and every target model; a list gives each (cluster, target) pair the
one profile measured for its TP and model (`simctl calibrate` measures one per pair), and
a pair that none fits, or two, is an error. Like a model config, a profile is read once
and travels with each task as data.

Everything is checked before anything runs (`load_spec`): each problem is one
`SweepSpecError` line naming the file, the key and the value. A parameter's values are
recorded typed, as run.json's `params` record them (`"4"` for an integer is 4), and a swept
integer must fit 64 bits (a table column). Each point records the fingerprints of its
input files' contents (`Point.inputs`): a rerun after one changed runs the point again.

Policies are built-in names or installed entry points (`traces/plugins.py`). The spec is
data and never names code: a plug-in class from a module or a file is named on the
command line (`simctl sweep --plugin file.py:Class`), then listed in `[policies]` by its
policy name; its tasks receive the loadable spec string (the file's absolute path).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from simctl.policies.compose import drafting_gap
from simctl.policies.family import Family
from simctl.policies.params import INT64_MAX, INT64_MIN, ParamError, PolicySpecError
from simctl.policies.registry import REGISTRY
from simctl.replay_cmd import trace_cluster
from simctl.sim.cluster import ClusterSpec, parse_cluster
from simctl.sim.cost_model import (
    CostModelError,
    ProfiledCostModel,
    check_profile,
    load_cost_model,
    read_profile,
)
from simctl.sim.engine_config import EngineConfig
from simctl.sim.model_spec import ModelSpec
from simctl.sim.models import model_from_record, model_of_trace, model_record
from simctl.sim.replay import profile_gap, trace_draft_methods
from simctl.sweep_transfer import file_digest
from simctl.traces.cli_options import MAX_NUM_SEQS_LIMIT, MAX_SEED
from simctl.traces.io import Trace, TraceError
from simctl.traces.paths import user_path
from simctl.traces.plugins import family as policy_family
from simctl.traces.plugins import is_plugin_spec, known_names, make_policy, plugin_file, resolve
from simctl.traces.validate import load_valid_trace

SWEEP_KEYS = ("traces", "steps", "clusters", "models", "max_num_seqs", "seeds", "zip", "profile")
AXES = ("traces", "steps", "clusters", "models", "max_num_seqs", "seeds")
DEFAULT_MAX_NUM_SEQS = EngineConfig().max_num_seqs
# `models` entry naming each trace's own model (a config folder called so: "./trace")
TRACE_MODEL = "trace"
# `clusters` entry naming each trace's recorded layout (`simctl replay`'s default: a generated
# trace's paper layout), else h100x512; the points record the layout itself
TRACE_LAYOUT = "trace"
ALL_STEPS = "all"
STEPS_TEXT = r"[0-9]{0,18}:[0-9]{0,18}|[0-9]{1,18}"  # N or A:B (a step fits 63 bits)
ZIP = "zip"
#: A sweep larger than this is refused up front (a typo in a grid, not a design space).
MAX_POINTS = 100_000


class SweepSpecError(ValueError):
    """A sweep spec that cannot run; the message is one line naming file, key and value."""


@dataclass(frozen=True)
class Point:
    """One point of the design space: plain data, what a sweep task receives."""

    trace: str  # as written in the spec
    trace_path: str  # resolved, absolute
    steps: str  # "A:B", "N" or "all"
    cluster: str  # as written in the spec ("trace": the layout the trace records)
    cluster_arg: str  # what parse_cluster reads (a relative TOML file resolved)
    policy: str  # family name
    params: tuple[tuple[str, Any], ...]  # given parameters, declaration order
    policy_spec: str  # "ngram:gamma=4"
    seed: int
    task_spec: str = ""  # a plug-in's loadable spec, when not policy_spec (not recorded)
    model: str = ""  # the target as written in the spec ("": the trace's own)
    # the target's catalogue name, and its config's pricing fields where it is not one
    model_name: str = ""
    model_config: dict[str, Any] | None = None
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS  # the engine's batch limit per worker
    profile: str = ""  # the measured cost profile as written in the spec ("": the roofline)
    profile_doc: Any = None  # its parsed JSON, sent to the task (None: the roofline)
    # fingerprints of the contents of the files the point reads (`input_fingerprints`)
    inputs: tuple[tuple[str, str], ...] = ()

    def record(self) -> dict[str, Any]:
        """What the point's run.json records and a rerun compares (no machine paths): what
        the point is (`identity`) and the fingerprints of its input files' contents
        (`inputs`), so that a point whose trace, cluster TOML, plug-in file, model config
        or profile changed since it ran is no longer complete and runs again, rather than
        being tabled beside points computed from the new inputs."""
        out = self.identity()
        if self.inputs:
            out["inputs"] = dict(self.inputs)
        return out

    def identity(self) -> dict[str, Any]:
        """The point as the spec names it, its parameters typed as run.json records them.
        A point on the trace's own model records no model, and one at the default batch
        limit no limit: its id is what it was before sweeps had those axes, so their
        directories resume."""
        out = {
            "trace": self.trace,
            "steps": self.steps,
            "cluster": self.cluster,
            "policy": self.policy,
            "params": dict(self.params),
            "policy_spec": self.policy_spec,
            "seed": self.seed,
        }
        if self.model:
            out["model"] = self.model
        if self.max_num_seqs != DEFAULT_MAX_NUM_SEQS:
            out["max_num_seqs"] = self.max_num_seqs
        if self.profile:
            out["profile"] = self.profile
        return out

    @property
    def point_id(self) -> str:
        """Stable across runs and machines: the policy's name and a hash of its identity
        (not of its inputs' contents: a point whose trace changed keeps its directory,
        which its rerun replaces)."""
        text = json.dumps(self.identity(), sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return f"{re.sub(r'[^A-Za-z0-9_-]+', '_', self.policy)}-{digest}"


class SweepProfile(NamedTuple):
    """The sweep's measured cost profile: as the spec names it, its JSON (what the tasks
    receive) and its cost model (built once, to check it against clusters and policies)."""

    label: str
    doc: Any
    model: ProfiledCostModel


@dataclass
class SweepSpec:
    path: Path
    points: list[Point]
    traces: dict[str, Trace] = field(default_factory=dict)  # label -> loaded trace

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(p.policy for p in self.points))

    @property
    def params(self) -> list[str]:
        return list(dict.fromkeys(k for p in self.points for k, _ in p.params))


def load_spec(path: Path, plugins: Sequence[str] = ()) -> SweepSpec:
    """Parse and check a sweep spec; SweepSpecError (one line) on the first problem.
    `plugins`: plug-in specs the user named on the command line (`module:Class`,
    `file.py:Class`), which `[policies]` may then list by their names."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepSpecError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepSpecError(f"{path}: cannot read ({str(exc).splitlines()[0]})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SweepSpecError(f"{path}: not valid TOML ({str(exc).splitlines()[0]})") from None
    return spec_from_data(raw, path, plugins)


def command_line_plugins(specs: Sequence[str]) -> dict[str, tuple[Family[Any], str]]:
    """Policy name -> (family, loadable spec) of each `--plugin` spec, a file made absolute."""
    out: dict[str, tuple[Family[Any], str]] = {}
    for spec in specs:
        head, _, rest = spec.partition(":")
        if not is_plugin_spec(spec) or ":" in rest:
            raise SweepSpecError(f"--plugin {spec!r}: expected module.path:Class or file.py:Class")
        if plugin_file(spec):
            spec = f"{user_path(head).resolve()}:{rest}"
        try:
            family, _ = resolve(spec)
        except PolicySpecError as exc:
            raise SweepSpecError(f"--plugin: {exc}") from None
        if family.name in REGISTRY or family.name in out:
            raise SweepSpecError(f"--plugin {spec!r}: policy name {family.name!r} is already taken")
        out[family.name] = (family, spec)
    return out


def spec_from_data(raw: dict[str, Any], path: Path, plugins: Sequence[str] = ()) -> SweepSpec:
    """The spec of parsed TOML `raw` (read from `path`, which messages name)."""
    checker = _Checker(path, command_line_plugins(plugins))
    checker.keys(raw, "", ("sweep", "policies"), required=("sweep", "policies"))
    sweep = checker.table(raw["sweep"], "sweep")
    checker.keys(sweep, "sweep", SWEEP_KEYS, required=("traces",))
    axes: dict[str, list[Any]] = {
        "traces": checker.strings(sweep["traces"], "sweep.traces"),
        "steps": [str(s) for s in checker.steps(sweep.get("steps", ALL_STEPS))],
        "clusters": checker.strings(sweep.get("clusters", TRACE_LAYOUT), "sweep.clusters"),
        "models": checker.models(sweep["models"]) if "models" in sweep else [""],
        "max_num_seqs": checker.batch_limits(sweep.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS)),
        "seeds": checker.seeds(sweep.get("seeds", 0)),
    }
    groups = checker.zips(sweep.get(ZIP, []), "sweep.zip", axes)
    policies = checker.policies(checker.table(raw["policies"], "policies"))
    own = "" in axes["models"]  # (some points replay the trace's own model)
    traces = {label: checker.trace(label, f"sweep.traces = {label!r}", own) for label in axes["traces"]}
    layout = {label: trace_layout(trace) for label, trace in traces.items()}
    concrete = [c for c in axes["clusters"] if c != TRACE_LAYOUT]
    if TRACE_LAYOUT in axes["clusters"]:
        concrete += [layout[t] for t in axes["traces"]]
    resolved = {label: checker.model(label) for label in axes["models"] if label}
    models = {label: record for label, (record, _) in resolved.items()}
    # every target, as points name it: (model label, trace label ("" but for a trace's own
    # model), the target)
    named = [("", t, model_of_trace(traces[t].meta, "trace")) for t in axes["traces"]] if own else []
    named += [(label, "", target) for label, (_, target) in resolved.items()]
    profiles = checker.profiles(sweep["profile"]) if "profile" in sweep else []
    # (cluster, model label, trace label) -> the profile that prices those points
    priced: dict[tuple[str, str, str], SweepProfile] = {}
    # what a cluster and a target are whatever their spelling ("a100x8" is "A100x8:tp1")
    clusters: dict[str, str] = {}
    for label in dict.fromkeys(concrete):
        cluster = checker.cluster(label, [target for _, _, target in named])
        clusters[label] = json.dumps({**cluster.to_dict(), "source": None}, sort_keys=True)
        for model, trace_label, target in named if profiles else []:
            priced[label, model, trace_label] = checker.match_profile(profiles, label, cluster, target)
    # (a named target by its catalogue name: "qwen2.5-7b" is "Qwen2.5-7B"; a trace's own
    # model stays apart from a named one, even the same: "each trace's own, and this one
    # for all" is a sensible axis over traces of several models)
    targets = {(m, t): f"named {target.name}" if m else TRACE_MODEL for m, t, target in named}
    paths = {label: str(checker.resolve(label)) for label in axes["traces"]}  # (once per trace)
    points, same = [], []
    for combo in _combinations(axes, groups):
        trace = combo["traces"]
        if combo["clusters"] == TRACE_LAYOUT:
            combo = {**combo, "clusters": layout[trace]}
        chosen = checker.select_steps(combo["steps"], trace, traces[trace])
        profile = None
        if profiles:
            profile = priced[combo["clusters"], combo["models"], "" if combo["models"] else trace]
        simulation = (
            paths[trace],
            tuple(chosen),
            clusters[combo["clusters"]],
            targets[combo["models"], "" if combo["models"] else trace],
            combo["max_num_seqs"],
            combo["seeds"],
            profile.label if profile else "",
        )
        for family, params in policies:
            points.append(checker.point(combo, family, params, traces[trace], models, profile))
            same.append(simulation)
            if len(points) > MAX_POINTS:
                raise SweepSpecError(f"{path}: more than {MAX_POINTS} points; split the sweep")
    _check_unique(path, points, same)
    return SweepSpec(path=path, points=points, traces=traces)


def trace_layout(trace: Trace) -> str:
    """The cluster a trace's points run on under `clusters = ["trace"]`: the layout its
    metadata records (`trace gen` writes its preset's paper layout), else replay's default
    (h100x512), as `simctl replay` without --cluster."""
    return trace_cluster(trace.meta.cluster, None)[0]


def _check_unique(path: Path, points: list[Point], simulations: list[tuple[Any, ...]]) -> None:
    """No point twice, written alike (a value listed twice, two grids overlapping) or not
    (steps "0" and "0:1" of a trace whose first step is 0, a cluster or target spelled two
    ways, one trace under two paths): the same simulation, run and tabled twice."""
    seen: set[str] = set()
    by_simulation: dict[tuple[Any, ...], Point] = {}
    for p, simulation in zip(points, simulations, strict=True):
        if p.point_id in seen:
            raise SweepSpecError(
                f"{path}: point {p.policy_spec} trace={p.trace} steps={p.steps} cluster={p.cluster} "
                f"max_num_seqs={p.max_num_seqs} seed={p.seed} appears twice (a value listed twice, or two "
                "grids overlap)"
            )
        seen.add(p.point_id)
        twin = by_simulation.setdefault((p.policy_spec, *simulation), p)
        if twin is not p:
            raise SweepSpecError(
                f"{path}: point {p.policy_spec} trace={p.trace} steps={p.steps} cluster={p.cluster} "
                f"model={p.model or TRACE_MODEL} is the simulation of trace={twin.trace} steps={twin.steps} "
                f"cluster={twin.cluster} model={twin.model or TRACE_MODEL} written another way; list it once"
            )


def _combinations(axes: Mapping[str, list[Any]], groups: list[list[str]]) -> Iterator[dict[str, Any]]:
    """Cross product of the axes, each zip group advancing together."""
    zipped = {a for g in groups for a in g}
    units: list[list[dict[str, Any]]] = [
        [dict(zip(g, vals, strict=True)) for vals in zip(*(axes[a] for a in g), strict=True)] for g in groups
    ]
    units += [[{a: v} for v in axes[a]] for a in axes if a not in zipped]
    for parts in itertools.product(*units):
        combo: dict[str, Any] = {}
        for part in parts:
            combo.update(part)
        yield combo


def grid(values: Mapping[str, list[Any]], groups: list[list[str]]) -> Iterator[dict[str, Any]]:
    """A policy's parameter grid: the cross product, zip groups advancing together."""
    return _combinations(values, groups)


@dataclass
class _Checker:
    """The checks, each raising SweepSpecError with the file, key and value."""

    path: Path
    plugins: dict[str, tuple[Family[Any], str]] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # file -> SHA-256, once per sweep

    def digest(self, path: Path, key: str) -> str:
        """SHA-256 of a file's contents, read (streamed) once per file per spec load."""
        name = str(path)
        if name not in self.digests:
            try:
                self.digests[name] = file_digest(path)
            except OSError as exc:
                raise self.fail(key, f"cannot read {path} ({exc.strerror or exc})") from None
        return self.digests[name]

    def inputs(
        self, combo: dict[str, Any], family: Family[Any], models: Mapping[str, Any], profile: Any
    ) -> tuple[tuple[str, str], ...]:
        """Fingerprints of what a point reads: its trace file, its cluster TOML (a file),
        its plug-in's source file, its model's config and its profile."""
        trace = combo["traces"]
        out = [("trace", self.digest(self.resolve(trace), f"sweep.traces = {trace!r}"))]
        cluster = combo["clusters"]
        if cluster.endswith(".toml"):
            out.append(("cluster", self.digest(self.resolve(cluster), f"sweep.clusters = {cluster!r}")))
        if family.name in self.plugins:
            source = plugin_source(self.plugins[family.name][1])
            if source is not None:
                out.append(("plugin", self.digest(source, f"--plugin {self.plugins[family.name][1]!r}")))
        if combo["models"] and models[combo["models"]][1] is not None:
            out.append(("model", data_digest(models[combo["models"]][1])))
        if profile is not None:
            out.append(("profile", data_digest(profile.doc)))
        return tuple(out)

    def fail(self, key: str, problem: str) -> SweepSpecError:
        return SweepSpecError(f"{self.path}: {key}: {problem}" if key else f"{self.path}: {problem}")

    def keys(
        self, table: Mapping[str, Any], where: str, known: Sequence[str], required: Sequence[str]
    ) -> None:
        for key in table:
            if key not in known:
                name = f"{where}.{key}" if where else key
                raise self.fail(name, f"unknown key (known: {', '.join(known)})")
        for key in required:
            if key not in table:
                raise self.fail(f"{where}.{key}" if where else key, "missing")

    def table(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a table, got {_show(value)}")
        return value

    def listed(self, value: Any, key: str) -> list[Any]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.fail(key, "empty list")
        for item in items:
            if items.count(item) > 1:
                raise self.fail(key, f"lists {_show(item)} twice")
        return items

    def strings(self, value: Any, key: str) -> list[str]:
        items = self.listed(value, key)
        for item in items:
            if not isinstance(item, str) or not item or "\0" in item:
                raise self.fail(f"{key} = {_show(item)}", "expected a non-empty string without NUL bytes")
        return items

    def steps(self, value: Any) -> list[str]:
        items = self.listed(value, "sweep.steps")
        for item in items:
            # (ASCII digits, at most 18: int() reads them all, and a step fits 63 bits)
            ok = isinstance(item, str) and (item == ALL_STEPS or re.fullmatch(STEPS_TEXT, item))
            if not (ok or (isinstance(item, int) and not isinstance(item, bool) and item >= 0)):
                raise self.fail(f"sweep.steps = {_show(item)}", f"expected N, A:B or {ALL_STEPS!r}")
        return [str(i) for i in items]

    def seeds(self, value: Any) -> list[int]:
        items = self.listed(value, "sweep.seeds")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= MAX_SEED:
                raise self.fail(f"sweep.seeds = {_show(item)}", "expected an integer >= 0")
        return items

    def models(self, value: Any) -> list[str]:
        """The target labels; `TRACE_MODEL` stands for each trace's own model ("")."""
        return ["" if m == TRACE_MODEL else m for m in self.strings(value, "sweep.models")]

    def batch_limits(self, value: Any) -> list[int]:
        items = self.listed(value, "sweep.max_num_seqs")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_NUM_SEQS_LIMIT:
                where = f"sweep.max_num_seqs = {_show(item)}"
                raise self.fail(where, f"expected an integer from 1 to {MAX_NUM_SEQS_LIMIT}")
        return items

    def zips(self, value: Any, key: str, axes: Mapping[str, list[Any]]) -> list[list[str]]:
        if not isinstance(value, list) or not all(isinstance(g, list) for g in value):
            raise self.fail(f"{key} = {_show(value)}", "expected a list of lists of axis names")
        used: set[str] = set()
        for group in value:
            for name in group:
                if not isinstance(name, str) or name not in axes:
                    raise self.fail(
                        f"{key} = {_show(group)}", f"{_show(name)} is not one of {', '.join(axes)}"
                    )
                if name in used:
                    again = "twice in a zip group" if group.count(name) > 1 else "in two zip groups"
                    raise self.fail(f"{key} = {_show(group)}", f"{_show(name)} is {again}")
                used.add(name)
            lengths = {len(axes[name]) for name in group}
            if len(lengths) > 1:
                sizes = ", ".join(f"{n} has {len(axes[n])}" for n in group)
                raise self.fail(f"{key} = {_show(group)}", f"zipped lists differ in length ({sizes})")
        return [list(g) for g in value if g]

    def resolve(self, label: str) -> Path:
        """A relative file: against the spec's folder, then the current directory."""
        given = user_path(label)
        if given.is_absolute():
            return given
        beside = self.path.parent / given
        return (beside if beside.exists() or not given.exists() else given).resolve()

    def trace(self, label: str, key: str, own_model: bool = True) -> Trace:
        """The trace, valid; its model known where points replay it (`own_model`)."""
        try:
            trace = load_valid_trace(self.resolve(label))
        except TraceError as exc:
            raise self.fail(key, exc.one_line()) from None
        if own_model:
            try:
                model_of_trace(trace.meta, f"trace {label}")
            except ValueError as exc:
                raise self.fail(key, str(exc).splitlines()[0]) from None
        return trace

    def model(self, label: str) -> tuple[tuple[str, dict[str, Any] | None], ModelSpec]:
        """`model_record` of a target (a catalogue name, or a HF config file or directory;
        relative: against the spec's folder, then the current directory), and its model as a
        task will build it from that record."""
        beside = self.path.parent / user_path(label)
        name = str(beside.resolve()) if not Path(label).is_absolute() and beside.exists() else label
        try:
            record = model_record(name)
            spec = model_from_record(*record, source=label)
        except (ValueError, OSError) as exc:
            raise self.fail(f"sweep.models = {label!r}", (str(exc).splitlines() or ["invalid"])[0]) from None
        return record, spec

    def cluster_text(self, label: str) -> str:
        return str(self.resolve(label)) if label.endswith(".toml") else label

    def profiles(self, value: Any) -> list[SweepProfile]:
        """The sweep's measured cost profiles (one path, or a list of them), each a valid
        one, built once."""
        if isinstance(value, str):
            return [self.profile(value)]
        if not isinstance(value, list) or not value:
            raise self.fail(
                f"sweep.profile = {_show(value)}", "expected the path of a profile file, or a list of them"
            )
        if len(set(map(str, value))) != len(value):
            raise self.fail(f"sweep.profile = {_show(value)}", "a profile is listed twice")
        return [self.profile(v) for v in value]

    def profile(self, value: Any) -> SweepProfile:
        """One measured cost profile, a valid one, built once."""
        if not isinstance(value, str) or not value or "\0" in value:
            raise self.fail(f"sweep.profile = {_show(value)}", "expected the path of a profile file")
        key = f"sweep.profile = {value!r}"
        try:
            doc = read_profile(self.resolve(value))
            return SweepProfile(value, doc, ProfiledCostModel.from_dict(doc, source=Path(value).name))
        except CostModelError as exc:
            raise self.fail(key, (str(exc).splitlines() or ["invalid"])[0]) from None

    def cluster(self, label: str, models: list[ModelSpec]) -> ClusterSpec:
        """The cluster, parsed, where every target model fits its workers."""
        key = f"sweep.clusters = {label!r}"
        try:
            spec = parse_cluster(self.cluster_text(label))
            for model in models:
                load_cost_model(model, spec, None)
        except (ValueError, OSError) as exc:
            raise self.fail(key, (str(exc).splitlines() or ["invalid"])[0]) from None
        return spec

    def match_profile(
        self, profiles: list[SweepProfile], label: str, spec: ClusterSpec, model: ModelSpec
    ) -> SweepProfile:
        """The one profile of `profiles` measured for `model` on the workers of cluster
        `label` (their TP): a sweep over TPs or targets lists one profile per pair, as
        `simctl calibrate` measures one per TP and model. None fitting, or two, is an error
        naming the cluster (with one profile: why it does not fit)."""
        key = f"sweep.clusters = {label!r}"
        fits, why = [], []
        for prof in profiles:
            try:
                check_profile(prof.model, Path(prof.label).name, model, spec)
            except CostModelError as exc:
                why.append((str(exc).splitlines() or ["invalid"])[0])
            else:
                fits.append(prof)
        if len(fits) == 1:
            return fits[0]
        if len(profiles) == 1:
            raise self.fail(key, why[0])
        if fits:
            names = " and ".join(repr(p.label) for p in fits)
            raise self.fail(key, f"profiles {names} both price {model.name} at tp={spec.tp}; list one")
        raise self.fail(
            key, f"no profile of sweep.profile prices {model.name} at tp={spec.tp}: " + "; ".join(why)
        )

    def select_steps(self, steps: str, label: str, trace: Trace) -> list[int]:
        """The trace's steps that `steps` selects (none: one line)."""
        if steps == ALL_STEPS:
            return list(trace.steps)
        available = trace.steps
        if ":" in steps:
            a, b = steps.split(":", 1)
            lo, hi = int(a) if a else min(available), int(b) if b else max(available) + 1
            chosen = [s for s in available if lo <= s < hi]
        else:
            chosen = [s for s in available if s == int(steps)]
        if not chosen:
            raise self.fail(
                f"sweep.steps = {steps!r}",
                f"selects no step of {label} (it has steps {available[0]}..{available[-1]})",
            )
        return chosen

    def policies(self, table: dict[str, Any]) -> list[tuple[Family[Any], dict[str, Any]]]:
        """(family, given parameters) for every grid point of every policy."""
        if not table:
            raise self.fail("policies", "no policy (add e.g. `verl = {}`)")
        out: list[tuple[Family[Any], dict[str, Any]]] = []
        for name, value in table.items():
            if not isinstance(name, str):  # (a dict spec from the Python API; TOML keys are text)
                raise self.fail(f"policies.{name!r}", "a policy's name must be text")
            family = self.family(name)
            grids = value if isinstance(value, list) else [value]
            if not grids:
                raise self.fail(f"policies.{name}", "empty list of grids")
            for g in grids:
                out += [
                    (family, params) for params in self.policy_grid(family, self.table(g, f"policies.{name}"))
                ]
        return out

    def family(self, name: str) -> Family[Any]:
        """A built-in, installed or --plugin policy; never code named by the spec (a
        --plugin policy is found by its name first: its name may hold a ':')."""
        if name in self.plugins:
            return self.plugins[name][0]
        if is_plugin_spec(name):
            raise self.fail(
                f"policies.{name}",
                f"no policy has this name (known: {', '.join(sorted({*known_names(), *self.plugins}))}), "
                "and a sweep spec names policies, never code: pass the class with --plugin on "
                "the command line and list its policy by its name",
            )
        try:
            return policy_family(name)
        except PolicySpecError as exc:
            if not str(exc).startswith("unknown policy"):
                raise self.fail(f"policies.{name}", str(exc)) from None
            known = ", ".join(sorted({*known_names(), *self.plugins}))
            raise self.fail(f"policies.{name}", f"unknown policy; known: {known}") from None

    def policy_grid(self, family: Family[Any], table: dict[str, Any]) -> list[dict[str, Any]]:
        declared = {d.name: d for d in family.declared()}
        where = f"policies.{family.name}"
        values: dict[str, list[Any]] = {}
        for key, value in table.items():
            if key == ZIP:
                continue
            if key.replace("-", "_") not in declared:
                known = ", ".join(declared) or "none"
                raise self.fail(f"{where}.{key}", f"unknown parameter (known: {known})")
            name = key.replace("-", "_")
            if name in values:
                spelled = next(k for k in table if k != key and k.replace("-", "_") == name)
                raise self.fail(f"{where}.{key}", f"{name} given twice (as {spelled!r} and {key!r})")
            items = self.listed(value, f"{where}.{key}")
            for item in items:
                self.param_value(family, name, item)
            values[name] = items
        groups = self.zips(table.get(ZIP, []), f"{where}.zip", values)
        combos = list(grid(values, groups))
        for combo in combos:
            try:
                family.resolve(policy_args(family, combo))
            except PolicySpecError as exc:
                raise self.fail(f"{where} = {_show(combo)}", str(exc)) from None
        return combos

    def param_value(self, family: Family[Any], key: str, value: Any) -> None:
        kind = next(d.kind for d in family.declared() if d.name == key)
        where = f"policies.{family.name}.{key} = {_show(value)}"
        if isinstance(value, dict | list):
            raise self.fail(where, f"expected a single value (allowed: {kind.allowed})")
        try:
            parsed = kind.parse(_text(value))
        except ParamError as exc:
            raise self.fail(where, f"{exc} (allowed: {kind.allowed})") from None
        # (a swept integer must fit a table column, Parquet's int64, whatever its kind says)
        lo, hi = INT64_MIN, INT64_MAX
        for number in parsed if isinstance(parsed, tuple) else (parsed,):
            if isinstance(number, int) and not isinstance(number, bool) and not lo <= number <= hi:
                raise self.fail(where, f"out of range: a swept integer must fit 64 bits ({lo}..{hi})")

    def point(
        self,
        combo: dict[str, Any],
        family: Family[Any],
        params: dict[str, Any],
        trace: Trace,
        models: Mapping[str, tuple[str, dict[str, Any] | None]],
        profile: SweepProfile | None = None,
    ) -> Point:
        spec = policy_spec(family, params)
        task_spec = ""
        if family.name in self.plugins:
            args = policy_args(family, params)
            task_spec = self.plugins[family.name][1] + (f":{args}" if args else "")
        policy = make_policy(task_spec or spec)
        gap = drafting_gap(policy, trace_draft_methods(trace))
        if gap:
            raise self.fail(f"sweep.traces = {combo['traces']!r}", f"{gap} (policies.{family.name})")
        if profile is not None:
            unpriced = profile_gap(policy, trace_draft_methods(trace), profile.model)
            if unpriced:
                raise self.fail(f"sweep.profile = {profile.label!r}", f"{unpriced} (policies.{family.name})")
        return Point(
            trace=combo["traces"],
            trace_path=str(self.resolve(combo["traces"])),
            steps=combo["steps"],
            cluster=combo["clusters"],
            cluster_arg=self.cluster_text(combo["clusters"]),
            policy=family.name,
            params=tuple(
                (d.name, typed_value(d.kind, params[d.name])) for d in family.declared() if d.name in params
            ),
            policy_spec=spec,
            seed=combo["seeds"],
            task_spec=task_spec,
            model=combo["models"],
            model_name=models[combo["models"]][0] if combo["models"] else "",
            model_config=models[combo["models"]][1] if combo["models"] else None,
            max_num_seqs=combo["max_num_seqs"],
            profile=profile.label if profile else "",
            profile_doc=profile.doc if profile else None,
            inputs=self.inputs(combo, family, models, profile),
        )


def data_digest(doc: Any) -> str:
    """SHA-256 of JSON data (a profile, a model config) in a canonical form."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def plugin_source(spec: str) -> Path | None:
    """The source file of a `--plugin` spec's class: the file of `file.py:Class`, the
    module's file of `module.path:Class` (None where it has none, e.g. a compiled module)."""
    named = plugin_file(spec)
    if named is not None:
        return Path(named)
    try:
        found = importlib.util.find_spec(spec.partition(":")[0])
    except (ImportError, ValueError):
        return None
    origin = found.origin if found is not None else None
    return Path(origin) if origin and Path(origin).is_file() else None


def _text(value: Any) -> str:
    """A TOML value as command-line text for the parameter's kind."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def typed_value(kind: Any, value: Any) -> Any:
    """A spec's parameter value as run.json's `params` record it (`"4"` for an integer
    is 4, `"yes"` for a flag is true): the table's column and the point's id are the
    simulation's, however the spec spelled the value."""
    return kind.to_json(kind.parse(_text(value)))


def policy_args(family: Family[Any], params: Mapping[str, Any]) -> str:
    """`key=value,...` in declaration order, each value in the kind's canonical text."""
    parts = []
    for d in family.declared():
        if d.name in params:
            parts.append(f"{d.name}={d.kind.format(d.kind.parse(_text(params[d.name])))}")
    return ",".join(parts)


def policy_spec(family: Family[Any], params: Mapping[str, Any]) -> str:
    args = policy_args(family, params)
    return f"{family.name}:{args}" if args else family.name


def _show(value: Any) -> str:
    """A value on one line, as the spec would write it."""
    text = json.dumps(value, default=str, ensure_ascii=True)
    return text if len(text) <= 80 else text[:77] + "..."
