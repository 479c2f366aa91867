"""The attribute and resource kinds the ML rules need: data mixtures and accelerators."""

from __future__ import annotations

import pytest

from marinbuild.targets import attrs as types
from marinbuild.targets.rule import Resources


def test_a_mixture_is_one_label_or_weights_over_labels() -> None:
    assert types.MIXTURE.normalize(":tokens", "exp") == "//exp:tokens"
    mixture = types.MIXTURE.normalize({":a": 0.7, "//data:b": 0.3}, "exp")
    assert mixture == {"//exp:a": 0.7, "//data:b": 0.3}
    assert types.MIXTURE.labels(mixture) == ["//exp:a", "//data:b"]
    assert types.MIXTURE.map_labels(mixture, str.upper) == {"//EXP:A": 0.7, "//DATA:B": 0.3}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({":a": -1}, "non-negative number"),
        ({":a": True}, "non-negative number"),
        ({":a": 0}, "positive weight"),
        (3, "expected a dict"),
    ],
)
def test_bad_mixtures_say_why(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        types.MIXTURE.normalize(value, "exp")


def test_resources_name_accelerators() -> None:
    default = Resources(cpu=2)
    wanted = Resources.from_json({"accelerator": "H100", "accelerator_count": 8}, default)
    assert (wanted.cpu, wanted.accelerator, wanted.accelerator_count) == (2, "H100", 8)
    with pytest.raises(ValueError, match="known: accelerator, accelerator_count, cpu, hosts, memory_gb, slices"):
        Resources.from_json({"gpus": 8}, default)
