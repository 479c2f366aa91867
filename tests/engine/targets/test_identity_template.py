"""A target's key made from its identity template (targets/identity.py) is the key of its
recipe, byte for byte: a template that drifted from the recipe would change every key of
every team's store (everything rebuilt), or worse, give two recipes one key.

Each test computes both for every target, with tokens full of what JSON must escape, with
and without the optional parts of a recipe (external inputs, `--strict-code`), and checks
the cases that must fall back to serialising the recipe.
"""

from __future__ import annotations

from pathlib import Path

from conftest import build_json, statuses
from helpers_workspace import loader_for

from marinbuild.actions.analysis import keys
from marinbuild.actions.analysis.graph import Graph, build_graph, expand_patterns
from marinbuild.labels import parse_pattern
from marinbuild.session import Session
from marinbuild.targets import identity
from marinbuild.targets.rule import Target

REPO = Path(__file__).resolve().parents[3]

# Tokens a template must escape exactly as canonical JSON does.
_ODD = ['quote " and back\\slash', "tab\tnewline\n", "ünïcødé ☃ \u2028", "\x00\x1f\x7f", "</script>", "plain"]


def _token(name: str) -> str:
    return f"output:{_ODD[sum(map(ord, name)) % len(_ODD)]}{name}"


def _recipe_key(target: Target, salt: str, external: str | None, code: str | None) -> str:
    return keys.action_key(keys.recipe(target, _token, salt, external, code))


def assert_keys_match_recipes(graph: Graph, salt: str = "s4lt") -> None:
    for label, target in graph.targets.items():
        for external, code in [(None, None), ("e" * 64, None), (None, "c" * 64), ('ext "1"', "code\\2")]:
            expected = _recipe_key(target, salt, external, code)
            assert keys.target_key(target, _token, salt, external, code) == expected, (label, external, code)


def test_every_target_of_the_experiments_keys_the_same_from_its_template():
    loader = loader_for(REPO)  # no package cache: nothing written into the checkout
    graph = build_graph(loader, expand_patterns(loader, [parse_pattern("//experiments/...", "")], ()))
    assert_keys_match_recipes(graph)
    # The template path is what is checked: every target has one, but where a label is a
    # dictionary key (the scaling fit's `runs`).
    without = {label for label, target in graph.targets.items() if target.identity is None}
    assert without == {label for label, target in graph.targets.items() if _labels_as_keys(target)}
    assert len(without) < len(graph.targets) / 10 and len(graph.targets) > 20
    assert any(target.identity and len(target.identity[1]) > 1 for target in graph.targets.values())


def _labels_as_keys(target: Target) -> bool:
    return any(
        isinstance(target.attrs[name], dict) and attr.type.labels(target.attrs[name])
        for name, attr in target.rule.all_attrs.items()
    )


RULES = """
import shutil

from marinbuild.targets import Attr, Rule, StepInput, checkpoint_dir
from marinbuild.targets import attrs as types


def _write(ctx):
    (ctx.out / "out.txt").write_text("x\\n")


def _keep(ctx):
    state = ctx.tmp / "state"
    state.mkdir()
    (state / "value.txt").write_text("3\\n")
    ctx.publish_checkpoint(3, state)
    shutil.copytree(state, ctx.out / checkpoint_dir(3))


keeper = Rule(name="keeper", impl=_keep, attrs={"keep": Attr(types.JSON, default=[3])}, keeps_checkpoints="keep")


anything = Rule(
    name="anything",
    impl=_write,
    attrs={
        "text": Attr(types.STRING, default=""),
        "srcs": Attr(types.LABEL_LIST, default=[]),
        "weights": Attr(types.LABEL_KEYED_DICT, default={}),
        "src": Attr(types.OPTIONAL_LABEL, default=None),
        "step": Attr(types.INT, default=None),
        "options": Attr(types.JSON, default={}),
    },
    step_inputs={"src": StepInput("step", "a target")},
)

mixer = Rule(name="mixer", impl=_write, attrs={"data": Attr(types.MIXTURE)})
"""

BUILD = """
anything(name = "a", text = "a")
anything(name = "b", srcs = [":a", "in.txt"], options = {"z": [1, 2.5, None], "a": {"q": "\\u2603"}})
mixer(name = "single", data = ":a")
mixer(name = "mixed", data = {":a": 0.7, ":b": 0.3})
anything(name = "keyed", weights = {":b": 1, ":a": 2})
keeper(name = "k")
anything(name = "at_step", src = ":k", step = 3)
genrule(name = "cmd", srcs = [":a", "in.txt"], outs = ["o.txt"], cmd = "cat $(location :a) $(locations in.txt) > $@")
"""


def _workspace(make_workspace) -> Path:
    return make_workspace(
        {"toyrules.py": RULES, "p/BUILD.marin": BUILD, "p/in.txt": "in\n"}, config='rules = ["toyrules"]\n'
    )


def test_templates_are_exact_for_every_kind_of_label_attribute(make_workspace):
    graph = Session.open(_workspace(make_workspace)).plan(["//p:all"])
    assert_keys_match_recipes(graph)
    templates = {label: target.identity for label, target in graph.targets.items()}
    # A label used as a dictionary key decides the order of the sorted keys: no template.
    assert templates["//p:mixed"] is None and templates["//p:keyed"] is None
    assert all(templates[f"//p:{name}"] is not None for name in ("a", "b", "single", "at_step", "cmd"))
    # A label read at a step stands for the kept state; a label inside a command is a hole
    # within a string.
    assert templates["//p:at_step"][1] == ("//p:k at step 3",)
    assert set(templates["//p:cmd"][1]) >= {"//p:a", "//p:in.txt"}


def test_templates_come_back_from_the_package_cache_unchanged(make_workspace):
    ws = _workspace(make_workspace)
    first = Session.open(ws).plan(["//p:all"])
    again = Session.open(ws).plan(["//p:all"])  # read from .marinbuild/packages.pickle
    assert (ws / ".marinbuild/packages.pickle").is_file()
    assert {label: t.identity for label, t in first.targets.items()} == {
        label: t.identity for label, t in again.targets.items()
    }
    assert_keys_match_recipes(again)


def test_a_value_holding_the_hole_marker_gets_no_template(make_workspace):
    marker = f"@{identity._NONCE}:0@"
    ws = make_workspace(
        {
            "toyrules.py": RULES,
            "p/BUILD.marin": f'anything(name = "a")\nanything(name = "b", text = "{marker}", srcs = [":a"])\n',
        },
        config='rules = ["toyrules"]\n',
    )
    graph = Session.open(ws).plan(["//p:all"])
    assert graph.targets["//p:b"].identity is None
    assert_keys_match_recipes(graph)
    # A salt holding the marker of where the attributes go: the recipe is serialised.
    assert_keys_match_recipes(graph, salt="\x00attrs\x00")


def test_a_build_and_a_no_op_agree_on_every_key(make_workspace):
    """Keys computed when the packages were just evaluated and when they come from the
    package cache are the same: the second build is all cache hits."""
    ws = _workspace(make_workspace)
    built = build_json(ws, "//p:all")
    assert set(statuses(built).values()) == {"built"}
    again = build_json(ws, "//p:all")
    assert set(statuses(again).values()) == {"cached"}
