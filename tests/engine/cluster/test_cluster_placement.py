"""Declared resources -> Ray requests: CPUs, GPU hosts and TPU slices (hosts, chips, head),
and where the processes of a multi-host step meet."""

from __future__ import annotations

import json

import pytest
from helpers_workspace import assert_bad_input, build, new_workspace

from marinbuild.cluster.distributed import rendezvous
from marinbuild.cluster.placement import HostRequest, Placement, placement
from marinbuild.targets.rule import Resources
from marinbuild.targets.tpu import tpu_slice

GIB = 2**30


def test_cpu_steps_ask_for_cores_and_memory() -> None:
    request = placement(Resources(cpu=2, memory_gb=4))
    assert request == Placement(HostRequest(2.0, 0.0, 4 * GIB))
    assert request.host.options() == {"num_cpus": 2.0, "num_gpus": 0.0, "memory": 4 * GIB}
    assert placement(Resources(cpu=1, hosts=2)).processes == 2


def test_gpu_hosts_ask_for_gpus_of_a_kind_on_each_host() -> None:
    resources = Resources.from_json(
        {"accelerator": "H100", "accelerator_count": 8, "hosts": 2, "cpu": 16, "memory_gb": 64}, Resources()
    )
    request = placement(resources)
    assert request.processes == 2 and request.slice_head is None
    assert request.host.options() == {
        "num_cpus": 16.0,
        "num_gpus": 8.0,
        "memory": 64 * GIB,
        "accelerator_type": "H100",
    }


def test_a_v5p_64_slice_is_8_hosts_of_4_chips_reserved_by_its_head() -> None:
    request = placement(Resources.from_json({"accelerator": "v5p-64", "cpu": 8}, Resources()))
    assert (request.hosts_per_slice, request.slices, request.processes) == (8, 1, 8)
    assert request.slice_head == "TPU-v5p-64-head"
    options = request.host.options({"my-slice": 1})
    assert options["resources"] == {"TPU": 4.0, "my-slice": 1}
    assert options["accelerator_type"] == "TPU-V5P" and options["num_gpus"] == 0.0
    two = placement(Resources.from_json({"accelerator": "v5p-64", "slices": 2}, Resources()))
    assert (two.slices, two.processes) == (2, 16)


@pytest.mark.parametrize(
    ("type_", "chips", "per_host", "hosts"),
    [
        ("v4-8", 4, 4, 1),
        ("v4-32", 16, 4, 4),
        ("v5p-8", 4, 4, 1),
        ("v5p-64", 32, 4, 8),
        ("v5litepod-4", 4, 4, 1),
        ("v5litepod-8", 8, 8, 1),
        ("v5litepod-16", 16, 4, 4),
        ("v6e-8", 8, 8, 1),
        ("v6e-256", 256, 4, 64),
        ("v3-32", 16, 4, 4),
    ],
)
def test_tpu_types_agree_with_rays_own_tables(type_: str, chips: int, per_host: int, hosts: int) -> None:
    from ray._private.accelerators import tpu as ray_tpu

    found = tpu_slice(type_)
    assert (found.chips, found.chips_per_host, found.hosts) == (chips, per_host, hosts)
    assert found.chips == ray_tpu.get_total_chips_from_accelerator_type(type_)
    assert found.chips_per_host == ray_tpu.get_num_tpu_visible_chips_per_host(type_)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"accelerator": "v4x-8"}, "not a TPU slice type"),
        ({"accelerator": "v5p-abc"}, "not a TPU slice type"),
        ({"accelerator": "v5p-64", "hosts": 2}, "ask for more with 'slices'"),
        ({"accelerator": "H100", "slices": 2}, "'slices' counts TPU slices"),
        ({"hosts": 0}, "must be at least 1"),
    ],
)
def test_bad_resource_requests_say_why(value: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Resources.from_json(value, Resources())


def test_several_hosts_for_a_single_host_rule_is_a_load_error(tmp_path) -> None:
    ws = new_workspace(
        tmp_path / "ws",
        {
            "pkg/BUILD.marin": (
                'genrule(name = "x", outs = ["x.txt"], cmd = "true > $@",\n        resources = {"hosts": 2})\n'
            )
        },
    )
    result = build(ws, "//pkg:x")
    assert_bad_input(
        result, ws, "pkg/BUILD.marin", 1, "genrule 'x': resources ask for 2 hosts, but genrule runs on one host"
    )


def test_two_v5p_64_slices_meet_through_jax_distributed_and_megascale() -> None:
    two = placement(Resources.from_json({"accelerator": "v5p-64", "slices": 2}, Resources()))
    ips = [f"10.0.{slice_}.{host}" for slice_ in range(two.slices) for host in range(two.hosts_per_slice)]
    contexts = rendezvous(ips, 41000, two.hosts_per_slice)
    assert [context["process_id"] for context in contexts] == list(range(16))
    assert {context["coordinator"] for context in contexts} == {"10.0.0.0:41000"}
    assert {context["num_processes"] for context in contexts} == {16}
    # Hosts 0-7 are slice 0, 8-15 slice 1; all know the first host of slice 0.
    assert [context["env"]["MEGASCALE_SLICE_ID"] for context in contexts] == ["0"] * 8 + ["1"] * 8
    assert {context["env"]["MEGASCALE_COORDINATOR_ADDRESS"] for context in contexts} == {"10.0.0.0:8081"}
    assert {context["env"]["MEGASCALE_NUM_SLICES"] for context in contexts} == {"2"}
    # One slice (or several GPU hosts): JAX distributed alone.
    assert {json.dumps(context["env"]) for context in rendezvous(ips[:8], 41000, 8)} == {"{}"}
