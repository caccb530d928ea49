"""The backend factory table, the one list of draft methods, and `simctl live`'s options
dataclass against the click command it is built from."""

from __future__ import annotations

import click

from simctl.live import drafters
from simctl.live.backend_factory import BACKENDS, BackendSpec, missing_engine
from simctl.live.calibrate import calibrate_cmd
from simctl.live.capabilities import TORCH_DRAFT_METHODS, VLLM_DRAFT_METHODS
from simctl.live.cli import live_cmd
from simctl.live.live_options import LiveOptions
from simctl.policies.draft_methods import DraftMethod


def _choices(cmd: click.Command, name: str) -> list[str]:
    param = next(p for p in cmd.params if p.name == name)
    assert isinstance(param.type, click.Choice)
    return list(param.type.choices)


def test_every_backend_choice_has_a_factory() -> None:
    assert (
        sorted(BACKENDS)
        == sorted(_choices(live_cmd, "backend"))
        == sorted(_choices(calibrate_cmd, "backend"))
    )


def test_draft_methods_come_from_the_one_list() -> None:
    methods = tuple(m.value for m in DraftMethod)
    assert methods == drafters.KNOWN
    assert frozenset(methods) == TORCH_DRAFT_METHODS
    assert VLLM_DRAFT_METHODS <= TORCH_DRAFT_METHODS
    assert set(drafters.MODEL_FREE) <= {m.value for m in DraftMethod if m.model_free}


def test_spec_reads_capabilities_from_the_table() -> None:
    for name, kind in BACKENDS.items():
        spec = BackendSpec(name, "random:tiny", 0, 1.0, True, 8)
        assert spec.capabilities == kind.capabilities and spec.draft_methods == kind.draft_methods


def test_torch_is_installed_here() -> None:
    assert missing_engine("torch") is None


def test_live_options_hold_every_option_of_the_command() -> None:
    params = {p.name: p.get_default(click.Context(live_cmd)) for p in live_cmd.params if p.name}
    opts = LiveOptions.from_params(params)
    fields = {
        *LiveOptions.__dataclass_fields__,
        *vars(opts.workload),
        *vars(opts.engine),
        *vars(opts.output),
    } - {"workload", "engine", "output"}
    assert fields == set(params)
    assert opts.engine.backend == "torch" and opts.policies == ("verl",) and opts.workload.group_size == 4
