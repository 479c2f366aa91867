"""train_lm's `model`, `optimizer` and `trainer`: checked when the BUILD file loads,
completed with the defaults of rules/common/lm_config.py, and in step with Levanter's classes.

A typo used to load, get a key and pass `build --dry-run`, failing only in the worker
(on a cluster, after a TPU slice was reserved). These tests run the CLI as a user would
and never train: the one real training that shows `show` printing the defaults is in
tests/rules/lm/test_train_lm.py.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types as pytypes
import typing
from pathlib import Path

import pytest
from conftest import build_json, keys
from helpers_workspace import assert_bad_input, build, loader_for, run_cli

from marinbuild.targets import attrs as types
from rules.common import lm_config, ranges

REPO = Path(__file__).resolve().parents[3]
CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls"]\n'
BUILD_FILE = "exp/BUILD.marin"
TRAIN_LINE = 4  # the line of `train_lm(` in _build_file
MODEL = '{"hidden_dim": 32, "intermediate_dim": 128, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "seq_len": 64}'


def _build_file(model: str = MODEL, optimizer: str = '{"learning_rate": 3e-3}', trainer: str = '{"steps": 6}') -> str:
    return f"""\
python_corpus(name = "corpus", sample_count = 40, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
train_lm(
    name = "model",
    data = ":tokens",
    model = {model},
    optimizer = {optimizer},
    trainer = {trainer},
)
"""


def _workspace(make_workspace, **fields: str) -> Path:
    return make_workspace({BUILD_FILE: _build_file(**fields)}, config=CONFIG)


# -- at load time, through the CLI ------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "value", "field", "suggestion"),
    [
        ("model", '{"hidden_dim": 32, "num_layer": 1}', "num_layer", "num_layers"),
        ("optimizer", '{"learnin_rate": 3e-3}', "learnin_rate", "learning_rate"),
        ("trainer", '{"steps": 6, "batch_sise": 4}', "batch_sise", "batch_size"),
    ],
)
def test_a_typo_fails_at_load_with_the_line_and_a_suggestion(
    make_workspace, attribute: str, value: str, field: str, suggestion: str
) -> None:
    ws = _workspace(make_workspace, **{attribute: value})
    result = build(ws, "--dry-run", "//exp:model")
    assert_bad_input(
        result, ws, BUILD_FILE, TRAIN_LINE, f"train_lm 'model': attribute '{attribute}': unknown field '{field}'"
    )
    assert f"hint: did you mean '{suggestion}'" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("model", '{"num_layers": 2.5}', "field 'num_layers': expected an int, got float 2.5"),
        ("optimizer", '{"learning_rate": "fast"}', "field 'learning_rate': expected a number, got str 'fast'"),
        ("trainer", '{"steps": True}', "field 'steps': expected an int, got bool True"),
        ("trainer", '{"batch_size": 4}', "missing required field 'steps'"),
        ("optimizer", '{"max_grad_norm": [1.0]}', "field 'max_grad_norm': expected a number or None, got list [1.0]"),
        ("model", "[]", "expected a dict of fields, got list []"),
    ],
)
def test_a_wrong_type_fails_at_load_with_the_line(make_workspace, attribute: str, value: str, message: str) -> None:
    ws = _workspace(make_workspace, **{attribute: value})
    assert_bad_input(
        build(ws, "--dry-run", "//exp:model"),
        ws,
        BUILD_FILE,
        TRAIN_LINE,
        f"train_lm 'model': attribute '{attribute}': {message}",
    )


def test_a_value_outside_the_choices_fails_with_a_suggestion(make_workspace) -> None:
    ws = _workspace(make_workspace, optimizer='{"lr_schedule": "cosin"}')
    result = build(ws, "--dry-run", "//exp:model")
    assert_bad_input(
        result,
        ws,
        BUILD_FILE,
        TRAIN_LINE,
        "train_lm 'model': attribute 'optimizer': field 'lr_schedule': expected one of 'constant', 'cosine',",
    )
    assert "hint: did you mean 'cosine'?" in result.stderr, result.stderr


_PART_OF_RUN = (
    "a fraction of the run in [0, 1] (a float) or a number of steps 0 or >= 2 (an int; Levanter reads 1 as the "
    "whole run)"
)


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("optimizer", '{"learning_rate": 0.0}', "field 'learning_rate': expected > 0, got 0.0"),
        ("optimizer", '{"weight_decay": -1}', "field 'weight_decay': expected >= 0, got -1.0"),
        ("optimizer", '{"beta2": 1.0}', "field 'beta2': expected in [0, 1), got 1.0"),
        ("optimizer", '{"beta1": -0.1}', "field 'beta1': expected in [0, 1), got -0.1"),
        ("optimizer", '{"epsilon": 0}', "field 'epsilon': expected > 0, got 0.0"),
        # A float is a fraction of the run, an int a number of steps; Levanter reads 1 as a fraction.
        ("optimizer", '{"warmup": 1}', f"field 'warmup': expected {_PART_OF_RUN}, got 1"),
        ("optimizer", '{"warmup": 100.0}', f"field 'warmup': expected {_PART_OF_RUN}, got 100.0"),
        ("optimizer", '{"decay": -2}', f"field 'decay': expected {_PART_OF_RUN}, got -2"),
        ("optimizer", '{"min_lr_ratio": -0.1}', "field 'min_lr_ratio': expected in [0, 1], got -0.1"),
        ("optimizer", '{"update_rms_clipping": 0}', "field 'update_rms_clipping': expected > 0, got 0.0"),
        ("trainer", '{"steps": 1}', "field 'steps': expected >= 2 (Levanter never checkpoints its step 0), got 1"),
        ("trainer", '{"steps": 6, "batch_size": 0}', "field 'batch_size': expected >= 1, got 0"),
        ("trainer", '{"steps": 6, "eval_interval": -3}', "field 'eval_interval': expected >= 1, got -3"),
        ("trainer", '{"steps": 6, "max_eval_batches": 0}', "field 'max_eval_batches': expected >= 1, got 0"),
        ("model", '{"seq_len": 0}', "field 'seq_len': expected >= 1, got 0"),
        ("model", '{"hidden_dim": -32}', "field 'hidden_dim': expected >= 1, got -32"),
        ("model", '{"intermediate_dim": 0}', "field 'intermediate_dim': expected >= 1, got 0"),
        ("model", '{"num_layers": 0}', "field 'num_layers': expected >= 1, got 0"),
        ("model", '{"num_heads": 0}', "field 'num_heads': expected >= 1, got 0"),
        ("model", '{"num_kv_heads": 0}', "field 'num_kv_heads': expected >= 1, got 0"),
        ("model", '{"layer_norm_epsilon": 0}', "field 'layer_norm_epsilon': expected > 0, got 0.0"),
        ("model", '{"family": "qwen", "hidden_dim": 0}', "field 'hidden_dim': expected >= 1, got 0"),
        (
            "model",
            '{"family": "olmo2", "attention_dropout": 1.5}',
            "field 'attention_dropout': expected in [0, 1), got 1.5",
        ),
    ],
)
def test_a_value_out_of_range_fails_at_load_with_the_field_the_range_and_the_value(
    make_workspace, attribute: str, value: str, message: str
) -> None:
    ws = _workspace(make_workspace, **{attribute: value})
    assert_bad_input(
        build(ws, "//exp:model"), ws, BUILD_FILE, TRAIN_LINE, f"train_lm 'model': attribute '{attribute}': {message}"
    )


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("model", '{"num_heads": 3, "num_kv_heads": 2}', "model: num_heads (3) must be a multiple of num_kv_heads (2)"),
        # The warmup and decay of a run within its steps, as Levanter counts them.
        ("optimizer", '{"warmup": 10}', "optimizer: warmup (10: 10 steps) takes more than the run's 6 steps"),
        (
            "optimizer",
            '{"warmup": 0.5, "decay": 0.7, "lr_schedule": "linear"}',
            "optimizer: warmup (0.5: 3 steps) and decay (0.7: 4 steps) take more than the run's 6 steps",
        ),
        (
            "optimizer",
            '{"decay": 0.1}',
            "optimizer: the decay takes none of the run's 6 steps (warmup 0.01: 0 steps, decay 0.1), and "
            "Levanter's cosine schedule needs at least one",
        ),
    ],
)
def test_fields_that_do_not_fit_together_fail_at_load(make_workspace, attribute: str, value: str, message: str) -> None:
    ws = _workspace(make_workspace, **{attribute: value})
    assert_bad_input(build(ws, "--dry-run", "//exp:model"), ws, BUILD_FILE, TRAIN_LINE, f"train_lm 'model': {message}")


_MIXTRAL = {"hidden_dim": 32, "intermediate_dim": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "seq_len": 64}


def _mixtral(**fields: object) -> str:
    """A Mixtral model dict as a BUILD file writes it: 4 experts, 2 per token, unless `fields` say."""
    model = {"family": "mixtral", **_MIXTRAL, "n_routed_experts": 4, "num_experts_per_tok": 2, **fields}
    return "{" + ", ".join(f"{json.dumps(name)}: {value!r}" for name, value in model.items()) + "}"


@pytest.mark.parametrize(
    ("model", "message", "hint"),
    [
        (
            _mixtral(n_experts=4),
            "unknown field 'n_experts' (family 'mixtral')",
            "'n_shared_experts', 'n_routed_experts', 'num_experts_per_tok'",
        ),
        (_mixtral(n_routed_experts=2.5), "field 'n_routed_experts': expected an int, got float 2.5", None),
        (_mixtral(lbl_coef="high"), "field 'lbl_coef': expected a number or None, got str 'high'", None),
        # A field of LlamaConfig that Levanter's Mixtral, or Qwen, would ignore is no field of theirs.
        (_mixtral(use_qk_norm=True), "unknown field 'use_qk_norm' (family 'mixtral')", None),
        ('{"family": "qwen", "sliding_window": 32}', "unknown field 'sliding_window' (family 'qwen')", None),
        (
            '{"family": "olmo2", "gradient_checkpointing": "full"}',
            "field 'gradient_checkpointing': expected a bool, got str 'full' (family 'olmo2')",
            None,
        ),
        ('{"family": "mixtrl"}', "field 'family': expected one of 'llama', 'mixtral', 'qwen', 'olmo2'", "'mixtral'"),
    ],
)
def test_a_bad_field_of_a_family_fails_at_load_with_the_line(
    make_workspace, model: str, message: str, hint: str | None
) -> None:
    ws = _workspace(make_workspace, model=model)
    result = build(ws, "--dry-run", "//exp:model")
    assert_bad_input(result, ws, BUILD_FILE, TRAIN_LINE, f"train_lm 'model': attribute 'model': {message}")
    if hint:
        assert f"hint: did you mean {hint}?" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (_mixtral(num_experts_per_tok=5), "model: num_experts_per_tok (5) must be at most n_routed_experts (4)"),
        (_mixtral(num_kv_heads=3), "model: num_heads (2) must be a multiple of num_kv_heads (3)"),
        # The ranges of a mixture's own fields.
        (_mixtral(num_experts_per_tok=0), "attribute 'model': field 'num_experts_per_tok': expected >= 1, got 0"),
        (_mixtral(n_routed_experts=0), "attribute 'model': field 'n_routed_experts': expected >= 1, got 0"),
        (_mixtral(n_shared_experts=-1), "attribute 'model': field 'n_shared_experts': expected >= 0, got -1"),
        (_mixtral(lbl_coef=-0.01), "attribute 'model': field 'lbl_coef': expected >= 0, got -0.01"),
    ],
)
def test_a_family_s_fields_that_do_not_fit_together_fail_at_load(make_workspace, model: str, message: str) -> None:
    ws = _workspace(make_workspace, model=model)
    assert_bad_input(build(ws, "--dry-run", "//exp:model"), ws, BUILD_FILE, TRAIN_LINE, f"train_lm 'model': {message}")


def test_the_family_is_part_of_the_key_and_a_llama_says_none(make_workspace) -> None:
    """Each family's dict holds its family and its own defaults; a Llama's holds no family
    field, written out or not, so Llama recipes kept the keys they had before families."""
    ws = _workspace(make_workspace)
    built = build(ws, "//exp:tokens")  # the data, whose digest a training's key holds
    assert built.rc == 0, built.stderr

    def loaded(model: str) -> tuple[dict, str]:
        (ws / BUILD_FILE).write_text(_build_file(model=model))
        attrs = loader_for(ws).package("exp").targets["model"].attrs
        return attrs["model"], keys(build_json(ws, "--dry-run", "//exp:model"))["//exp:model"]

    llama, llama_key = loaded(MODEL)
    assert "family" not in llama and loaded(MODEL.replace("{", '{"family": "llama", ', 1)) == (llama, llama_key)
    qwen, qwen_key = loaded(MODEL.replace("{", '{"family": "qwen", ', 1))
    ignored = ("head_dim", "hybrid_norm", "use_qk_norm")  # Levanter's Qwen has no such options
    assert qwen == {"family": "qwen", **{name: value for name, value in llama.items() if name not in ignored}}
    assert qwen_key != llama_key
    olmo2, _ = loaded(MODEL.replace("{", '{"family": "olmo2", ', 1))
    assert (olmo2["family"], olmo2["layer_norm_epsilon"], olmo2["attention_bias"]) == ("olmo2", 1e-6, False)
    assert "head_dim" not in olmo2
    mixtral, mixtral_key = loaded(_mixtral())
    assert mixtral["family"] == "mixtral" and (mixtral["n_shared_experts"], mixtral["lbl_coef"]) == (0, 0.01)
    assert loaded(_mixtral(n_routed_experts=8))[1] != mixtral_key


# -- the effective config ---------------------------------------------------------------------


def test_the_loaded_target_holds_the_effective_config(make_workspace) -> None:
    ws = _workspace(make_workspace, trainer='{"steps": 6, "eval_interval": 3}')
    attrs = loader_for(ws).package("exp").targets["model"].attrs
    assert attrs["optimizer"] == {**lm_config.resolve("optimizer", {}), "learning_rate": 3e-3}
    assert attrs["optimizer"]["weight_decay"] == 0.1 and attrs["optimizer"]["lr_schedule"] == "cosine"
    # checkpoint_interval defaults to steps; a given eval_interval is kept.
    assert attrs["trainer"] == {
        "steps": 6,
        "batch_size": 8,
        "eval_interval": 3,
        "checkpoint_interval": 6,
        "max_eval_batches": None,
    }
    assert attrs["model"]["activation_function"] == "silu" and attrs["model"]["num_layers"] == 1

    # `query --output build` prints the target as loaded: the defaults included.
    result = run_cli(["query", "--output", "build", "//exp:model"], cwd=ws)
    assert result.rc == 0, result.stderr
    assert '"weight_decay": 0.1' in result.stdout and '"checkpoint_interval": 6' in result.stdout, result.stdout


def test_explain_prints_the_defaults_and_a_changed_default_is_another_key(make_workspace) -> None:
    ws = _workspace(make_workspace)
    built = build(ws, "//exp:tokens")
    assert built.rc == 0, built.stderr
    result = run_cli(["explain", "//exp:model"], cwd=ws)
    assert result.rc == 0, result.stderr
    for line in ("optimizer.weight_decay = 0.1", "trainer.eval_interval = 6", "model.scan_layers = true"):
        assert line in result.stdout, result.stdout

    # Writing a default out is the same recipe; another value (a changed default) is another experiment.
    def key(optimizer: str) -> str:
        (ws / BUILD_FILE).write_text(_build_file(optimizer=optimizer))
        return keys(build_json(ws, "--dry-run", "//exp:model"))["//exp:model"]

    implicit = key('{"learning_rate": 3e-3}')
    assert key('{"learning_rate": 3e-3, "weight_decay": 0.1}') == implicit
    assert key('{"learning_rate": 3e-3, "weight_decay": 0.0}') != implicit


# -- the struct attribute type ---------------------------------------------------------------


def test_a_struct_checks_kinds_and_fills_defaults() -> None:
    struct = types.struct(
        [
            types.Field("steps", int),
            types.Field("rate", float, 0.5),
            types.Field("warmup", (int, float), 0.1),
            types.Field("every", int, types.same_as("steps")),
            types.Field("name", str, None, optional=True, choices=("a", "b")),
        ]
    )
    assert struct.normalize({"steps": 4}, "") == {"steps": 4, "rate": 0.5, "warmup": 0.1, "every": 4, "name": None}
    # An int where a number is expected is stored as a float, unless int is a kind too.
    resolved = struct.normalize({"steps": 4, "rate": 1, "warmup": 10, "every": 2, "name": "b"}, "")
    assert resolved == {"steps": 4, "rate": 1.0, "warmup": 10, "every": 2, "name": "b"}
    assert isinstance(resolved["rate"], float) and isinstance(resolved["warmup"], int)
    assert struct.normalize(resolved, "") == resolved  # resolving twice changes nothing
    with pytest.raises(types.AttrError, match="field 'steps': expected an int, got bool True"):
        struct.normalize({"steps": True}, "")
    with pytest.raises(types.AttrError, match="field 'rate': expected a number, got bool False"):
        struct.normalize({"steps": 1, "rate": False}, "")
    with pytest.raises(types.AttrError, match="field 'steps': expected an int, got NoneType None|got None"):
        struct.normalize({"steps": None}, "")
    with pytest.raises(types.AttrError, match="unknown field 'stesp'") as raised:
        struct.normalize({"stesp": 1}, "")
    assert raised.value.hint == "did you mean 'steps'?"
    with pytest.raises(types.AttrError, match="unknown field 'zzz'") as raised:
        struct.normalize({"zzz": 1}, "")
    assert raised.value.hint == "the fields are: steps, rate, warmup, every, name"
    # A default that fails its own field's check is a bug in the schema, caught when declared.
    with pytest.raises(types.AttrError):
        types.struct([types.Field("rate", float, "fast")])


def test_a_tagged_struct_takes_the_fields_of_the_variant_its_tag_names() -> None:
    tagged = types.tagged_struct(
        "kind",
        {"plain": [types.Field("size", int, 1)], "mixed": [types.Field("size", int, 2), types.Field("parts", int, 4)]},
        "plain",
    )
    # The default variant: no tag in the value, written out or not.
    assert tagged.normalize({}, "") == tagged.normalize({"kind": "plain"}, "") == {"size": 1}
    # Another: the tag, and that variant's fields and defaults.
    assert tagged.normalize({"kind": "mixed", "parts": 8}, "") == {"kind": "mixed", "size": 2, "parts": 8}
    with pytest.raises(types.AttrError, match=r"unknown field 'parts'$"):
        tagged.normalize({"parts": 8}, "")
    with pytest.raises(types.AttrError, match=r"field 'parts': expected an int, got str 'x' \(kind 'mixed'\)"):
        tagged.normalize({"kind": "mixed", "parts": "x"}, "")
    with pytest.raises(types.AttrError, match="field 'kind': expected one of 'plain', 'mixed', got 'mixd'") as raised:
        tagged.normalize({"kind": "mixd"}, "")
    assert raised.value.hint == "did you mean 'mixed'?"
    with pytest.raises(types.AttrError, match="expected a dict of fields"):
        tagged.normalize([], "")
    assert "plain=struct(size: int = 1)" in tagged.name and "parts: int = 4" in tagged.name


def test_the_schema_is_part_of_the_type_name() -> None:
    """The package cache fingerprints rules by their attribute types' names: a changed
    default must invalidate cached packages, since their attrs hold the old one."""
    before = types.struct([types.Field("rate", float, 0.5)])
    after = types.struct([types.Field("rate", float, 0.25)])
    assert before.name != after.name
    assert "eval_interval: int = <steps>" in lm_config.TRAINER.name


# -- the ranges (rules/common/ranges.py) --------------------------------------------------------


def _schemas() -> dict[str, dict[str, list[types.Field]]]:
    """{dict kind: {family or "": its fields}} of every dict the table covers."""
    from rules.posttrain.decls import LORA_FIELDS

    return {
        "model": {name: list(family.fields) for name, family in lm_config.FAMILIES.items()},
        "optimizer": {"": list(lm_config.OPTIMIZER_FIELDS)},
        "trainer": {"": list(lm_config.TRAINER_FIELDS)},
        "lora": {"": list(LORA_FIELDS)},
    }


def _numeric(field: types.Field) -> bool:
    return int in field.kinds or float in field.kinds


def test_every_numeric_field_has_a_range_that_holds_its_default() -> None:
    for kind, variants in _schemas().items():
        fields = [field for variant in variants.values() for field in variant]
        assert set(ranges.RANGES[kind]) == {field.name for field in fields if _numeric(field)}, kind
        for field in fields:
            default = field.default
            if _numeric(field) and isinstance(default, (int, float)) and not isinstance(default, bool):
                assert default in ranges.RANGES[kind][field.name], (kind, field.name, default)


def _outside(found: ranges.Range, field: types.Field) -> int | float:
    """A value of `field`'s kind just outside `found`."""
    if isinstance(found, ranges.FractionOrSteps):
        return 1
    value = found.low if found.low_open else found.low - 1
    return value if int in field.kinds else float(value)


def test_every_dict_type_refuses_each_field_out_of_range() -> None:
    """The types of train_lm's and sft_lm's attributes check the whole table, each family's
    model fields included (the CLI tests take one of each group)."""
    from rules.posttrain.decls import LORA

    kinds = {"model": lm_config.MODEL, "optimizer": lm_config.OPTIMIZER, "trainer": lm_config.TRAINER, "lora": LORA}
    required = {"trainer": {"steps": 6}}
    for kind, variants in _schemas().items():
        for family, fields in variants.items():
            for field in filter(_numeric, fields):
                value = _outside(ranges.RANGES[kind][field.name], field)
                tagged = {"family": family} if family else {}
                with pytest.raises(types.AttrError, match=rf"^field '{field.name}': expected .*, got {value!r}$"):
                    kinds[kind].normalize({**required.get(kind, {}), **tagged, field.name: value}, "")


# -- in step with Levanter --------------------------------------------------------------------


def _members(annotation: object) -> tuple[object, ...]:
    if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _accepts(annotation: object, field: types.Field) -> list[str]:
    """What `field` may hold that Levanter's `annotation` does not accept (empty: compatible)."""
    members = _members(annotation)
    enums = [member for member in members if isinstance(member, type) and issubclass(member, enum.Enum)]
    literals = {value for member in members if typing.get_origin(member) is typing.Literal for value in member.__args__}
    problems = []
    for kind in field.kinds:
        if kind is str and field.choices and enums:
            values = {item.value for item in enums[0]}
            if not set(field.choices) <= values:
                problems.append(f"choices {sorted(set(field.choices) - values)} are not {enums[0].__name__} values")
        elif kind is str and field.choices and literals:
            if not set(field.choices) <= literals:
                problems.append(f"choices {sorted(set(field.choices) - literals)} are not among {sorted(literals)}")
        elif kind not in members:
            problems.append(f"{kind.__name__} is not one of {members}")
    if field.optional and type(None) not in members:
        problems.append("None is not accepted")
    return problems


def _levanter_default(field: dataclasses.Field) -> object:
    value = field.default
    return value.value if isinstance(value, enum.Enum) else value


@pytest.mark.parametrize("kind", [*lm_config.FAMILIES, "optimizer"])
def test_the_schema_matches_levanters_config_classes(kind: str) -> None:
    from levanter.optim import AdamConfig
    from levanter.optim.config import LrSchedule

    from rules.common.levanter import configs

    if kind == "optimizer":
        cls, declared, excluded = AdamConfig, lm_config.OPTIMIZER_FIELDS, lm_config.OPTIMIZER_EXCLUDED
    else:
        family = lm_config.FAMILIES[kind]
        cls, declared, excluded = configs.CONFIG_CLASSES[kind], family.fields, family.excluded
    theirs = {field.name: field for field in dataclasses.fields(cls) if field.init}
    hints = typing.get_type_hints(cls)
    ours = {field.name: field for field in declared}

    # Every Levanter field is declared or excluded with a reason; nothing is both, nothing is made up.
    assert not set(ours) & set(excluded), set(ours) & set(excluded)
    assert set(theirs) - set(ours) - set(excluded) == set(), "new Levanter fields: declare or exclude them"
    assert set(ours) - set(theirs) == set(), "declared fields Levanter does not have"
    assert set(excluded) - set(theirs) == set(), "excluded fields Levanter does not have"
    assert all(reason.strip() for reason in excluded.values())

    for name, field in ours.items():
        assert _accepts(hints[name], field) == [], f"{kind}.{name}: {_accepts(hints[name], field)}"
        assert field.default == _levanter_default(theirs[name]), f"{kind}.{name}: Levanter's default differs"
    if kind == "optimizer":  # a string lr_schedule names a registered schedule
        assert set(ours["lr_schedule"].choices) <= set(LrSchedule.get_known_choices())
    else:  # the families' classes and Hugging Face architectures are the ones Levanter registers
        assert cls.get_choice_class(kind) is cls
        assert cls.get_choice_name(cls) == kind
        hf_config = cls().to_hf_config(vocab_size=10)
        assert hf_config.model_type == lm_config.FAMILIES[kind].hf_model_type


def test_a_part_of_the_run_in_range_is_what_levanter_reads_as_the_field_says() -> None:
    """warmup, decay, rewarmup, cycle_length: each value in range is one Levanter's schedule
    accepts, a float read as a fraction of the run and an int as that many steps; 1 and a
    float above 1, which Levanter would read otherwise than they are written, are out."""
    from levanter.optim.config import _convert_frac_or_steps

    steps = 1000
    part = ranges.RANGES["optimizer"]["warmup"]
    for value in (0, 2, 3, 999, 0.0, 0.001, 0.5, 1.0):
        assert value in part
        read = _convert_frac_or_steps(value, steps)
        assert read == (int(value * steps) if isinstance(value, float) else value), value
    for value in (1, -1, 1.5, 2.0, 100.0, -0.1):
        assert value not in part
    assert _convert_frac_or_steps(1, steps) == steps  # what an int 1 would mean: the whole run
    cycle = ranges.RANGES["optimizer"]["cycle_length"]
    assert 0 not in cycle and 0.0 not in cycle and 0.5 in cycle and 2 in cycle


def test_the_resolved_configs_build_levanters_configs(tmp_path: Path) -> None:
    """What the loader resolves (and an older output's partial model.json) makes Levanter's
    configs with Levanter's own defaults wherever the BUILD file said nothing."""
    from levanter.models.llama import LlamaConfig
    from levanter.optim import AdamConfig

    from rules.common.levanter import configs

    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    partial = {"hidden_dim": 64, "intermediate_dim": 256, "num_layers": 2, "num_heads": 4, "num_kv_heads": 4}
    model = configs.model_config(partial, tokenizer, tmp_path)
    assert model == dataclasses.replace(
        LlamaConfig(**partial), tokenizer=model.tokenizer, reference_checkpoint=model.reference_checkpoint
    )
    assert configs.model_config(lm_config.resolve("model", partial), tokenizer, tmp_path) == model
    # Levanter's AdamW, field for field; its learning rate is kept in the optimizer state
    # (rules/common/levanter/optim.py), so the class is a subclass.
    optimizer = configs.optimizer_config({"learning_rate": 1e-3})
    assert isinstance(optimizer, AdamConfig) and dataclasses.asdict(optimizer) == dataclasses.asdict(
        AdamConfig(learning_rate=1e-3)
    )
    # Each family's class, with every field the dict holds, and no older switch that would
    # override attn_backend.
    for name in ("mixtral", "qwen", "olmo2"):
        built = configs.model_config({"family": name, **partial}, tokenizer, tmp_path)
        assert type(built) is configs.CONFIG_CLASSES[name] and built.hidden_dim == 64
        assert getattr(built, "use_flash_attention", None) is None
        assert json.loads((Path(built.reference_checkpoint) / "config.json").read_text()) == {
            "model_type": lm_config.FAMILIES[name].hf_model_type
        }
    moe = configs.model_config({"family": "mixtral", **partial, "n_routed_experts": 4}, tokenizer, tmp_path)
    assert (moe.n_routed_experts, moe.num_experts_per_tok, moe.lbl_coef) == (4, 2, 0.01)
    trainer = configs.trainer_config(
        configs.TrainerSettings({"steps": 10, "batch_size": 4}, tmp_path / "m", tmp_path / "logs")
    )
    assert (trainer.num_train_steps, trainer.train_batch_size, trainer.steps_per_eval) == (10, 4, 10)
    assert trainer.max_eval_batches is None


def test_the_docs_list_every_field() -> None:
    text = (REPO / "docs" / "rules.md").read_text()
    section = text[text.index("### train_lm(") : text.index("### eval_lm(")]
    families = [field for family in lm_config.FAMILIES.values() for field in family.fields]
    for field in (*families, *lm_config.OPTIMIZER_FIELDS, *lm_config.TRAINER_FIELDS):
        assert f"`{field.name}`" in section, f"docs/rules.md does not list {field.name}"
    for family in lm_config.FAMILIES.values():
        assert f"`{family.name}`" in section, f"docs/rules.md does not describe the family {family.name}"


def test_the_learning_rate_is_a_value_of_the_optimizer_state_not_of_the_program() -> None:
    """A learning-rate sweep compiles its training step once (JAX's compilation cache
    serves the other rates): the rate is read from the optimizer state, and the schedule
    gives Levanter's values, bit for bit."""
    import jax
    import jax.numpy as jnp
    import optax
    from levanter.optim import AdamConfig

    from rules.common.levanter import configs

    params = {"w": jnp.ones((4, 3))}
    grads = {"w": jnp.full((4, 3), 0.5)}

    def lowered(learning_rate: float) -> str:
        optimizer = configs.optimizer_config({"learning_rate": learning_rate}).build(100)
        state = optimizer.init(params)
        return jax.jit(lambda grads, state: optimizer.update(grads, state, params)).lower(grads, state).as_text()

    assert lowered(1e-3) == lowered(3e-2)

    fields = {"learning_rate": 3e-3, "warmup": 0.1, "lr_schedule": "cosine", "min_lr_ratio": 0.1}
    ours = configs.optimizer_config(fields).build(50)
    levanters = AdamConfig(**lm_config.resolve("optimizer", fields)).build(50)
    state_ours, state_levanters = ours.init(params), levanters.init(params)
    for _step in range(50):
        update_ours, state_ours = jax.jit(ours.update)(grads, state_ours, params)
        update_levanters, state_levanters = jax.jit(levanters.update)(grads, state_levanters, params)
        assert state_ours.hyperparams["learning_rate"] == state_levanters.hyperparams["learning_rate"]
        assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), update_ours, update_levanters))
    assert isinstance(optax.tree.get(state_ours, "peak"), jax.Array)
