"""The ranges of the numeric fields of `model`, `optimizer`, `trainer` and `lora`: one table.

The schemas (rules/common/lm_config.py, `LORA_FIELDS` of rules/posttrain/decls.py) check each field's kind;
a value of the right kind can still be one that Levanter runs on without a word and to no
purpose: a negative learning rate trains by gradient ascent and is published as a
success, a beta1 of 1.5 diverges, a warmup of 2.5 fails only in the worker. `ranged` makes
a schema's type check every numeric value of a dict against `RANGES` as it normalizes it,
so that each rule taking one of these dicts (train_lm, sft_lm, and the train_lm targets
the scaling recipes of rules/scaling/scaling.star declare) refuses it where the BUILD file loads,
naming the line, the field, the range and the value. Checks across fields (num_heads a
multiple of num_kv_heads, warmup and decay within the run) stay with the rules.

Nothing here imports an ML library: loading BUILD files runs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

from marinbuild.targets.attrs import AttrError, AttrType, JsonValue


class Range(Protocol):
    """The values a numeric field may hold; `str` says which, for errors and the docs."""

    def __contains__(self, value: float) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Interval:
    """The numbers from `low` to `high` (None: no bound), each end in it unless open."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""  # said after the range: why a bound is where it is

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def __str__(self) -> str:
        if self.high is None:
            shown = f"{'>' if self.low_open else '>='} {self.low:g}"
        else:
            shown = f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        return f"{shown} ({self.why})" if self.why else shown


@dataclasses.dataclass(frozen=True)
class FractionOrSteps:
    """A part of the run as Levanter's schedule reads it (`_convert_frac_or_steps`): a float
    is a fraction of the steps, an int a number of steps. Levanter reads any value up to 1
    as a fraction, so an int 1 would be the whole run: it is refused, as is a float above
    1 (write the steps as an int: 100 and 100.0 would be two keys for one schedule)."""

    zero: bool = True  # whether 0 (none of the run) is a value of the field

    def __contains__(self, value: float) -> bool:
        if isinstance(value, float):
            return (0.0 <= value if self.zero else 0.0 < value) and value <= 1.0
        return value >= 2 or (self.zero and value == 0)

    def __str__(self) -> str:
        fraction, steps = ("[0, 1]", "0 or >= 2") if self.zero else ("(0, 1]", ">= 2")
        return (
            f"a fraction of the run in {fraction} (a float) or a number of steps {steps} "
            "(an int; Levanter reads 1 as the whole run)"
        )


POSITIVE = Interval(0, low_open=True)
NON_NEGATIVE = Interval(0)
COUNT = Interval(1)
PROBABILITY = Interval(0, 1, high_open=True)  # a dropout rate, an Adam beta: 1 never decays
FRACTION = Interval(0, 1)
PART_OF_RUN = FractionOrSteps()

# {dict: {field: range}}: every int or float field of these dicts (tests/rules/lm/test_lm_config.py
# holds the table to the schemas). A model's fields are those of every family.
RANGES: dict[str, dict[str, Range]] = {
    "model": {
        **dict.fromkeys(
            ("seq_len", "hidden_dim", "intermediate_dim", "num_layers", "num_heads", "num_kv_heads", "head_dim"), COUNT
        ),
        **dict.fromkeys(("flash_attention_block_size", "cross_entropy_block_size"), COUNT),
        "initializer_range": POSITIVE,
        "layer_norm_epsilon": POSITIVE,
        "n_routed_experts": COUNT,
        "num_experts_per_tok": COUNT,
        "n_shared_experts": NON_NEGATIVE,
        "lbl_coef": NON_NEGATIVE,
        "rzl_coef": NON_NEGATIVE,
        "attention_dropout": PROBABILITY,
    },
    "optimizer": {
        "learning_rate": POSITIVE,
        "weight_decay": NON_NEGATIVE,
        "min_lr_ratio": FRACTION,
        "warmup": PART_OF_RUN,
        "decay": PART_OF_RUN,
        "rewarmup": PART_OF_RUN,
        "cycle_length": FractionOrSteps(zero=False),
        "cycles": COUNT,
        "beta1": PROBABILITY,
        "beta2": PROBABILITY,
        "epsilon": POSITIVE,
        "max_grad_norm": Interval(0, low_open=True, why="None: no clipping"),
        "update_rms_clipping": POSITIVE,
        "skip_bad_steps": Interval(0, why="an int: the past steps each step is compared with; 0: none skipped"),
    },
    "trainer": {
        "steps": Interval(2, why="Levanter never checkpoints its step 0"),
        **dict.fromkeys(("batch_size", "eval_interval", "checkpoint_interval", "max_eval_batches"), COUNT),
    },
    "lora": {"r": COUNT, "alpha": POSITIVE, "dropout": PROBABILITY},
}
# {rule: {attribute: range}}: the numeric attributes of the rules around these dicts.
ATTR_RANGES: dict[str, dict[str, Range]] = {
    "sft_lm": {"seq_len": Interval(2, why="a token and the next")},
    "fit_scaling_law": {"huber_delta": POSITIVE, "noise_floor": NON_NEGATIVE, "bootstrap": NON_NEGATIVE},
    "mixture_draw": {"draw": NON_NEGATIVE, "concentration": POSITIVE, "max_repetition": POSITIVE, "tokens": COUNT},
    "mixture_fit": {"kl_weight": NON_NEGATIVE, "max_repetition": POSITIVE, "tokens": COUNT, "bootstrap": NON_NEGATIVE},
    "mixture_pick": {"tokens": COUNT},
}


def _outside(ranges: Mapping[str, Range], values: Mapping[str, JsonValue]) -> str | None:
    """'NAME': expected RANGE, got VALUE for the first numeric value outside its range.
    None, bools and strings are the schema's."""
    for name, value in values.items():
        if name in ranges and isinstance(value, (int, float)) and not isinstance(value, bool):
            if value not in ranges[name]:
                return f"'{name}': expected {ranges[name]}, got {value!r}"
    return None


def check(kind: str, fields: Mapping[str, JsonValue]) -> None:
    """Each numeric value of a resolved `kind` dict within its range, or AttrError naming
    the field, the range and the value."""
    outside = _outside(RANGES[kind], fields)
    if outside:
        raise AttrError(f"field {outside}")


def check_attrs(rule: str, attrs: Mapping[str, JsonValue]) -> None:
    """A rule's numeric attributes (`ATTR_RANGES`) within their ranges, for its `validate`."""
    outside = _outside(ATTR_RANGES[rule], attrs)
    if outside:
        raise ValueError(f"attribute {outside}")


def ranged(kind: str, schema: AttrType) -> AttrType:
    """`schema` (a struct of `kind`'s fields) that also checks their ranges (`check`)."""

    def normalize(value: JsonValue, package: str) -> JsonValue:
        resolved = schema.normalize(value, package)
        check(kind, resolved)
        return resolved

    shown = ", ".join(f"{name} {found}" for name, found in RANGES[kind].items())
    return AttrType(f"{schema.name} ranges({shown})", normalize, schema.map_labels)
