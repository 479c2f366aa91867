"""What a step's FLOPs cost on the accelerators it asks for (marinbuild/targets/compute.py):
chips counted from its resources, hours from the table's peak and the assumed utilisation."""

from __future__ import annotations

import pytest

from marinbuild.errors import Location
from marinbuild.labels import Label
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr
from marinbuild.targets.compute import ACCELERATORS, Estimate, check_utilisation, chips, estimate
from marinbuild.targets.rule import Resources, Rule, Target

FLOPS = 3.6e21  # what the toy rule says its step computes


def _noop(_ctx: object) -> None:
    pass


def _target(resources: dict, flops: float | None = FLOPS) -> Target:
    rule = Rule(
        name="toy_training",
        impl=_noop,
        attrs={"steps": Attr(types.INT, default=1)},
        flops=lambda _attrs, _lookup: flops,
    )
    attrs = {"name": "run", "tags": [], "description": "", "resources": resources, "timeout": None, "steps": 1}
    return Target(Label("exp", "run"), rule, attrs, Location("exp/BUILD.marin", 1))


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        (Resources(accelerator="v5p-64"), ("v5p", 32)),  # TensorCores: two a chip
        (Resources(accelerator="v5p-64", slices=2), ("v5p", 64)),
        (Resources(accelerator="v5litepod-16"), ("v5e", 16)),  # one core a chip
        (Resources(accelerator="v6e-8"), ("v6e", 8)),
        (Resources(accelerator="v4-32"), ("v4", 16)),
        (Resources(accelerator="H100", accelerator_count=8, hosts=2), ("H100", 16)),
        (Resources(accelerator="NVIDIA A100-SXM4-80GB"), ("A100", 1)),
        (Resources(accelerator="L4", accelerator_count=2), ("L4", 2)),  # not in the table: named as given
        (Resources(), None),
    ],
)
def test_the_chips_a_step_asks_for(resources: Resources, expected: tuple[str, int] | None) -> None:
    assert chips(resources) == expected


def test_an_estimate_is_the_flops_over_the_peak_at_the_assumed_utilisation() -> None:
    # 3.6e21 FLOPs on a v5p-64 (32 chips of 459e12 FLOP/s) at the default 40%:
    # 3.6e21 / (459e12 * 0.4) = 1.96078e7 chip-seconds = 5,446.6 chip-hours, 170.2 h on 32 chips.
    found = estimate(_target({"accelerator": "v5p-64"}), lambda _label: None)
    assert found is not None
    assert (found.accelerator, found.chips, found.utilisation) == ("v5p", 32, 0.4)
    assert found.hours == pytest.approx(3.6e21 / (459e12 * 0.4) / 3600)
    assert found.hours == pytest.approx(5446.6, abs=0.1)
    assert found.wall_hours == pytest.approx(5446.6 / 32, abs=0.01)
    assert found.describe() == "3.6e+21 FLOPs on 32 v5p chips at 40% utilisation: 5,447 accelerator-hours (170 h)"
    # Twice the utilisation, half the hours; a table by kind leaves the other kinds' defaults.
    assert estimate(_target({"accelerator": "v5p-64"}), lambda _l: None, 0.8).hours == pytest.approx(found.hours / 2)  # type: ignore[union-attr]
    by_kind = estimate(_target({"accelerator": "H100", "accelerator_count": 8}), lambda _l: None, {"v5p": 0.8})
    assert by_kind is not None and by_kind.utilisation == ACCELERATORS["H100"].utilisation
    # What it records reads back the same.
    assert Estimate.from_json(found.to_json()) == found


def test_measured_time_says_the_utilisation_it_implies() -> None:
    found = estimate(_target({"accelerator": "v5p-64"}), lambda _label: None)
    assert found is not None
    # Twice the estimated wall time: as if at half the utilisation assumed.
    line = found.against(2 * found.wall_hours * 3600)  # type: ignore[operator]
    assert line.endswith("took 10,893 accelerator-hours (340 h), as if at 20.0% utilisation"), line


def test_no_accelerator_costs_no_hours_and_unknown_kinds_or_flops_are_said() -> None:
    cpu = estimate(_target({"cpu": 2}), lambda _label: None)
    assert cpu is not None and cpu.hours == 0.0 and cpu.describe() == "3.6e+21 FLOPs, no accelerator"
    unknown = estimate(_target({"accelerator": "L4"}), lambda _label: None)
    assert unknown is not None and unknown.hours is None and "no peak rate known for L4" in unknown.describe()
    no_flops = estimate(_target({"accelerator": "v5p-8"}, flops=None), lambda _label: None)
    assert no_flops is not None and no_flops.flops is None and no_flops.describe().startswith("no estimate: ")


@pytest.mark.parametrize(
    ("value", "message"),
    [(1.5, "a fraction in (0, 1], got 1.5"), (True, "got True"), ({"TPU9": 0.5}, "unknown accelerator kind 'TPU9'")],
)
def test_a_utilisation_setting_out_of_its_range_is_refused(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        check_utilisation(value, "utilisation")
    assert check_utilisation({"v5p": 0.5}, "utilisation") == {"v5p": 0.5}
