"""Workspace discovery and loading BUILD.marin / .star files into targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import conftest
import pytest
from helpers_workspace import (
    build,
    error_line,
    loader_for,
    new_workspace,
    plan,
    run_cli,
    store_is_untouched,
    write_files,
)

from marinbuild.errors import LoadError, WorkspaceError
from marinbuild.packages import open_workspace
from marinbuild.session import Session
from marinbuild.store import resolve_store_url

# -- workspace discovery -------------------------------------------------------------------


def test_empty_marinbuild_toml_marks_the_root(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"a/b/BUILD.marin": ""})
    for start in (ws, ws / "a", ws / "a" / "b"):
        workspace = open_workspace(start)
        assert workspace.root == ws.resolve()
        assert workspace.config_file == ws.resolve() / "marinbuild.toml"
        assert workspace.store == "cache"
        assert workspace.jobs is None


def test_pyproject_with_a_tool_marinbuild_table_marks_the_root(tmp_path):
    ws = tmp_path / "ws"
    write_files(
        ws, {"pyproject.toml": '[project]\nname = "x"\n\n[tool.marinbuild]\nstore = "out/store"\njobs = 3\n', "a/x": ""}
    )
    workspace = open_workspace(ws / "a")
    assert workspace.root == ws.resolve()
    assert workspace.config_file.name == "pyproject.toml"
    assert workspace.jobs == 3
    assert resolve_store_url(workspace.store, workspace.root) == str(ws.resolve() / "out" / "store")


def test_empty_tool_marinbuild_table_is_enough(tmp_path):
    ws = tmp_path / "ws"
    write_files(ws, {"pyproject.toml": "[tool.marinbuild]\n", "a/x": ""})
    assert open_workspace(ws / "a").root == ws.resolve()


def test_pyproject_without_the_table_is_not_a_root(tmp_path):
    ws = new_workspace(tmp_path / "ws")
    write_files(
        ws, {"lib/pyproject.toml": '[project]\nname = "lib"\n\n[tool.ruff]\nline-length = 100\n', "lib/src/x": ""}
    )
    assert open_workspace(ws / "lib" / "src").root == ws.resolve()


def test_nearest_workspace_wins(tmp_path):
    outer = new_workspace(tmp_path / "outer")
    inner = new_workspace(outer / "inner", {"pkg/x": ""})
    assert open_workspace(inner / "pkg").root == inner.resolve()
    assert open_workspace(outer).root == outer.resolve()


def test_no_workspace_is_an_error(tmp_path):
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(tmp_path / "nothing" / "here")
    assert caught.value.message == f"no marinbuild workspace at or above {(tmp_path / 'nothing' / 'here').resolve()}"
    assert "marinbuild.toml" in caught.value.hint and "--workspace" in caught.value.hint


@pytest.mark.parametrize("config_name", ["marinbuild.toml", "pyproject.toml"])
def test_unknown_setting_is_an_error(tmp_path, config_name):
    ws = tmp_path / "ws"
    table = "[tool.marinbuild]\n" if config_name == "pyproject.toml" else ""
    write_files(ws, {config_name: table + 'store = "cache"\nstroe = "x"\nbogus = 1\n'})
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(ws)
    config = ws.resolve() / config_name
    assert caught.value.message == f"{config}: unknown settings ['bogus', 'stroe']"
    assert caught.value.hint.startswith(
        "did you mean 'store'? known settings: ['action_env', 'egress_budget_gb', 'executor',"
    )


def test_invalid_toml_is_an_error(tmp_path):
    ws = new_workspace(tmp_path / "ws", config="store = \n")
    with pytest.raises(WorkspaceError, match=r"marinbuild\.toml: invalid TOML: "):
        open_workspace(ws)


@pytest.mark.parametrize("value", ['"relative/dir"', "1", '""'])
def test_a_shared_scratch_is_an_absolute_path(tmp_path, value):
    ws = new_workspace(tmp_path / "ws", config=f"ray_shared_scratch = {value}\n")
    with pytest.raises(WorkspaceError, match=r"'ray_shared_scratch' must be an absolute path every node mounts"):
        open_workspace(ws)
    ws = new_workspace(tmp_path / "ok", config='ray_shared_scratch = "/mnt/shared"\n')
    assert open_workspace(ws).ray_shared_scratch == "/mnt/shared"


@pytest.mark.parametrize("value", ["0", "-2", '"4"', "1.5"])
def test_jobs_must_be_a_positive_integer(tmp_path, value):
    ws = new_workspace(tmp_path / "ws", config=f"jobs = {value}\n")
    with pytest.raises(WorkspaceError, match=r"'jobs' must be a positive integer"):
        open_workspace(ws)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("jobs", "true"),  # a bool is not a number of jobs
        ("rules", '"myrules"'),  # a string, not a list: would be imported letter by letter
        ("ignore", '"data"'),  # would ignore the directories 'd' and 'a' and 't'
        ("store", "5"),
    ],
)
def test_settings_of_the_wrong_type_are_errors(tmp_path, setting, value):
    ws = new_workspace(tmp_path / "ws", config=f"{setting} = {value}\n")
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(ws)
    assert f"'{setting}'" in caught.value.message


def test_ignore_setting_keeps_directories_out_of_recursive_patterns(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {"a/BUILD.marin": 'filegroup(name = "a")\n', "data/big/BUILD.marin": 'filegroup(name = "big")\n'},
        config='ignore = ["data"]\n',
    )
    assert plan(ws, "//...").requested == ["//a:a"]
    assert plan(ws, "//data/big:all").requested == ["//data/big:big"]  # still loadable by name


def test_recursive_patterns_skip_hidden_ignored_venv_and_symlinked_directories(tmp_path):
    target = 'filegroup(name = "t")\n'
    ws = new_workspace(
        tmp_path / "ws",
        {
            "BUILD.marin": target,
            "a/BUILD.marin": target,
            "a/b/c/BUILD.marin": target,
            "a/.hidden/BUILD.marin": target,
            "a/node_modules/x/BUILD.marin": target,
            "env/pyvenv.cfg": "home = /usr\n",  # a virtual environment, whatever its name
            "env/lib/BUILD.marin": target,
            "data/BUILD.marin": target,
            "odd/BUILD.marin/keep": "",  # a directory named BUILD.marin makes no package
        },
        config='ignore = ["data"]\n',
    )
    (ws / "a" / "link").symlink_to(ws / "a" / "b", target_is_directory=True)
    assert plan(ws, "//...").requested == ["//:t", "//a:t", "//a/b/c:t"]
    assert plan(ws, "//a/...").requested == ["//a:t", "//a/b/c:t"]
    # A pattern rooted in a virtual environment lists it: only the walk below a root skips them.
    assert plan(ws, "//env/...").requested == ["//env/lib:t"]


def test_cli_workspace_option_and_discovery(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": 'filegroup(name = "a")\n'})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = build(ws, "--dry-run", "--json", "//p:a", cwd=elsewhere)
    assert found.rc == 0, found.stderr
    assert [item["label"] for item in json.loads(found.stdout)["targets"]] == ["//p:a"]
    lost = run_cli(["build", "//p:a"], cwd=elsewhere)
    assert lost.rc == 2, lost.stderr
    assert error_line(lost.stderr) == f"marinbuild: error: no marinbuild workspace at or above {elsewhere.resolve()}"


def test_cli_unknown_setting_exits_2(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": 'filegroup(name = "a")\n'}, config="colour = true\n")
    result = build(ws, "//p:a")
    assert result.rc == 2
    assert (
        error_line(result.stderr) == f"marinbuild: error: {ws.resolve()}/marinbuild.toml: unknown settings ['colour']"
    )
    assert store_is_untouched(ws)


@pytest.mark.parametrize(
    ("module", "moved_to"),
    [
        ("rules.tokenizer", "rules.tokenize.decls"),  # gone: nothing to import there
        ("rules.webdata.filter_text", "rules.webdata.decls"),  # now a step, which declares no rule
    ],
)
def test_cli_a_rule_module_that_moved_exits_2_naming_where_its_rules_are(tmp_path, module, moved_to):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": 'filegroup(name = "a")\n'}, config=f'rules = ["{module}"]\n')
    result = build(ws, "//p:a")
    assert result.rc == 2
    assert (
        error_line(result.stderr)
        == f"marinbuild: error: {ws.resolve()}/marinbuild.toml: rule module '{module}' moved to '{moved_to}'"
    )
    assert f"name '{moved_to}' in the rules setting of marinbuild.toml" in result.stderr
    assert store_is_untouched(ws)


def test_a_workspace_folder_of_macros_does_not_hide_the_installed_rule_package_of_that_name(tmp_path):
    """A workspace of its own keeps its copy of //rules/lm:lm.star in rules/lm/, a folder
    without __init__.py: before the installed (editable) `rules` package on the path, it
    was imported as a namespace package, and `rules.lm.decls` and the steps were not found,
    by the loader nor by the worker that runs a step."""
    repo = Path(__file__).resolve().parents[3]
    files = {
        "rules/lm/lm.star": (repo / "rules" / "lm" / "lm.star").read_text(),
        "rules/data/sizes.star": "SMALL = 4\n",  # the family whose step runs, in its worker
        "p/BUILD.marin": 'load("//rules/lm:lm.star", "llama")\nload("//rules/data:sizes.star", "SMALL")\n'
        'python_corpus(name = "corpus", sample_count = SMALL, chunk_characters = 500, validation_fraction = 0.5)\n',
    }
    ws = new_workspace(tmp_path / "ws", files, config='rules = ["rules.lm.decls", "rules.data.decls"]\n')
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    rc, _out, err = conftest.run_cli(ws, "build", "//p:corpus", env=env)
    assert rc == 0 and "1 built" in err, err


# -- BUILD files and rules -----------------------------------------------------------------


def test_builtin_rules_are_globals_and_targets_are_recorded_in_order(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": """\
                # A comment.
                filegroup(name = "files", srcs = ["a.txt"])

                genrule(
                    name = "gen",
                    srcs = [":files"],
                    outs = ["out.txt"],
                    cmd = "cat $(SRCS) > $@",
                )
                py_step(name = "step", fn = "steps.py:run", config = {"lr": 0.1}, deps = [":gen"])
                """,
            "p/a.txt": "a\n",
            "p/steps.py": "def run(ctx):\n    pass\n",
        },
    )
    package = loader_for(ws).package("p")
    assert list(package.targets) == ["files", "gen", "step"]
    files, gen, step = package.targets.values()
    assert (files.rule.name, gen.rule.name, step.rule.name) == ("filegroup", "genrule", "py_step")
    assert [str(t.location) for t in package.targets.values()] == [
        "p/BUILD.marin:2",
        "p/BUILD.marin:4",
        "p/BUILD.marin:10",
    ]
    assert str(gen.label) == "//p:gen"
    # Labels are made absolute; omitted attributes take their defaults.
    assert dict(gen.attrs) == {
        "name": "gen",
        "tags": [],
        "description": "",
        "resources": {},
        "timeout": None,
        "srcs": ["//p:files"],
        "outs": ["out.txt"],
        "cmd": "cat $(SRCS) > $@",
    }
    assert step.attrs["fn"] == "//p:steps.py:run"
    assert step.attrs["deps"] == ["//p:gen"]
    assert step.attrs["config"] == {"lr": 0.1}


def test_empty_build_file_is_an_empty_package(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": ""})
    loader = loader_for(ws)
    assert loader.has_package("p")
    assert not loader.has_package("q")
    assert loader.package("p").targets == {}


def test_missing_package(tmp_path):
    ws = new_workspace(tmp_path / "ws")
    with pytest.raises(LoadError, match=r"^no package '//nope': "):
        loader_for(ws).package("nope")


def test_labels_in_attributes_are_made_absolute(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": """\
                genrule(
                    name = "g",
                    srcs = [":a", "b", "//q:c", "//q", "data/x.txt", "//:top"],
                    outs = ["o"],
                    cmd = "cat $(location :a) $(locations //q) > $@",
                )
                """,
        },
    )
    target = loader_for(ws).package("p").targets["g"]
    assert target.attrs["srcs"] == ["//p:a", "//p:b", "//q:c", "//q:q", "//p:data/x.txt", "//:top"]
    assert target.attrs["cmd"] == "cat $(location //p:a) $(locations //q:q) > $@"
    assert list(target.deps) == ["//p:a", "//p:b", "//q:c", "//q:q", "//p:data/x.txt", "//:top"]


def test_attribute_values_are_json_like(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": """\
                py_step(
                    name = "s",
                    fn = "//p:steps.py:main",
                    config = {
                        "int": 3, "float": 2.5, "neg": -1, "bool": True, "none": None, "str": "x",
                        "list": [1, [2, (3, 4)]], "tuple": (1, "a"), "nested": {"k": {"j": []}},
                    },
                )
                """,
        },
    )
    config = loader_for(ws).package("p").targets["s"].attrs["config"]
    assert config == {
        "int": 3,
        "float": 2.5,
        "neg": -1,
        "bool": True,
        "none": None,
        "str": "x",
        "list": [1, [2, [3, 4]]],
        "tuple": [1, "a"],
        "nested": {"k": {"j": []}},
    }
    assert type(config["tuple"]) is list and type(config["bool"]) is bool and type(config["int"]) is int
    json.dumps(config, allow_nan=False)


@pytest.mark.parametrize("value", ["float('nan')", "float('inf')", "-float('inf')", "[1.0, float('nan')]"])
def test_nan_and_infinity_are_not_json(tmp_path, value):
    ws = new_workspace(
        tmp_path / "ws", {"p/BUILD.marin": f"\npy_step(name = 's', fn = 'steps.py:main', config = {{'x': {value}}})\n"}
    )
    with pytest.raises(LoadError) as caught:
        loader_for(ws).package("p")
    assert str(caught.value).startswith("p/BUILD.marin:2: py_step 's': attribute 'config': ")


def test_starlark_features_work_in_build_files(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": """\
                SIZES = {"small": 1, "large": 8}

                def name_of(size):
                    return "train_" + size

                [
                    py_step(name = name_of(size), fn = "steps.py:train", config = {"size": n})
                    for size, n in sorted(SIZES.items())
                ]
                kwargs = dict(name = "all_files", srcs = [])
                filegroup(**kwargs)
                filegroup(name = package_name().replace("/", "_"))
                """,
        },
    )
    package = loader_for(ws).package("p")
    assert list(package.targets) == ["train_large", "train_small", "all_files", "p"]
    assert package.targets["train_small"].attrs["config"] == {"size": 1}
    # Targets made by a comprehension are declared at the line of the call inside it.
    assert str(package.targets["train_large"].location) == "p/BUILD.marin:7"
    assert str(package.targets["all_files"].location) == "p/BUILD.marin:11"


# -- load() and macros ---------------------------------------------------------------------

MACRO_FILES = {
    "rules/defs.star": """\
        load(":inner.star", "inner_macro")

        def outer_macro(name, text):
            inner_macro(name = name + "_gen", text = text)
            filegroup(name = name, srcs = [":" + name + "_gen", "local.txt"])

        GREETING = "hello"
        """,
    "rules/inner.star": """\
        def inner_macro(name, text):
            genrule(
                name = name,
                outs = [name + ".txt"],
                cmd = "echo " + text + " > $@",
            )
        """,
    "p/BUILD.marin": """\
        load("//rules:defs.star", "outer_macro", "GREETING")
        load(":local.star", local = "LOCAL_NAME")



        outer_macro(name = "m", text = GREETING)
        filegroup(name = local)
        """,
    "p/local.star": 'LOCAL_NAME = "from_local"\n',
    "p/local.txt": "x\n",
}


def test_load_absolute_and_relative_with_alias(tmp_path):
    ws = new_workspace(tmp_path / "ws", MACRO_FILES)
    package = loader_for(ws).package("p")
    assert list(package.targets) == ["m_gen", "m", "from_local"]
    assert package.targets["m_gen"].attrs["cmd"] == "echo hello > $@"


def test_macro_targets_are_located_at_the_outermost_build_call(tmp_path):
    ws = new_workspace(tmp_path / "ws", MACRO_FILES)
    package = loader_for(ws).package("p")
    assert {name: str(t.location) for name, t in package.targets.items()} == {
        "m_gen": "p/BUILD.marin:6",
        "m": "p/BUILD.marin:6",
        "from_local": "p/BUILD.marin:7",
    }


def test_relative_labels_in_macros_belong_to_the_calling_package(tmp_path):
    ws = new_workspace(tmp_path / "ws", MACRO_FILES)
    target = loader_for(ws).package("p").targets["m"]
    assert target.attrs["srcs"] == ["//p:m_gen", "//p:local.txt"]


def test_a_star_file_loaded_by_two_packages(tmp_path):
    files = dict(MACRO_FILES)
    files["q/BUILD.marin"] = 'load("//rules:defs.star", "outer_macro")\nouter_macro(name = "n", text = "q")\n'
    files["q/local.txt"] = ""
    ws = new_workspace(tmp_path / "ws", files)
    graph = plan(ws, "//...")
    assert graph.requested == ["//p:m_gen", "//p:m", "//p:from_local", "//q:n_gen", "//q:n"]
    assert str(graph.targets["//q:n"].location) == "q/BUILD.marin:2"
    assert sorted(graph.sources) == ["//p:local.txt", "//q:local.txt"]


# -- glob() --------------------------------------------------------------------------------

GLOB_FILES = {
    "p/a.txt": "",
    "p/b.txt": "",
    "p/c.md": "",
    "p/.hidden.txt": "",
    "p/data/x.txt": "",
    "p/data/deep/y.txt": "",
    "p/data/deep/z.json": "",
    "p/sub/BUILD.marin": "",
    "p/sub/s.txt": "",
    "p/sub/inner/t.txt": "",
    "p/dir.txt/file.bin": "",  # a directory whose name matches is not a file
}


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('glob(["*.txt"])', [".hidden.txt", "a.txt", "b.txt"]),
        ('glob(["*.txt", "*.md"])', [".hidden.txt", "a.txt", "b.txt", "c.md"]),
        ('glob(["*.txt"], exclude = [".*"])', ["a.txt", "b.txt"]),
        ('glob(["**/*.txt"], exclude = [".*", "data/deep/*"])', ["a.txt", "b.txt", "data/x.txt"]),
        ('glob(["data/**/*"])', ["data/deep/y.txt", "data/deep/z.json", "data/x.txt"]),
        ('glob(["**/*.json", "data/*"])', ["data/deep/z.json", "data/x.txt"]),
        ('glob(include = ["*.md"], exclude = ["*.txt"])', ["c.md"]),
        ('glob(["*"])', [".hidden.txt", "a.txt", "b.txt", "c.md"]),  # never the BUILD file itself
        ('glob(["*.nothing"], allow_empty = True)', []),
        ('glob(["*.txt"], exclude = ["*"], allow_empty = True)', []),
    ],
)
def test_glob(tmp_path, call, expected):
    ws = new_workspace(tmp_path / "ws", {**GLOB_FILES, "p/BUILD.marin": f"filegroup(name = 'g', srcs = {call})\n"})
    srcs = loader_for(ws).package("p").targets["g"].attrs["srcs"]
    assert srcs == [f"//p:{name}" for name in expected]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('glob(["data/**"])', ["data/deep/y.txt", "data/deep/z.json", "data/x.txt"]),
        ('glob(["**"], exclude = [".*", "data/**", "dir.txt/**"])', ["a.txt", "b.txt", "c.md"]),
        ('glob(["**/*.txt"], exclude = [".*", "data/deep/**"])', ["a.txt", "b.txt", "data/x.txt"]),
    ],
)
def test_glob_trailing_double_star_matches_every_file_below(tmp_path, call, expected):
    """As in Bazel, `dir/**` means every file under dir (Python 3.11's Path.glob gives only directories)."""
    ws = new_workspace(tmp_path / "ws", {**GLOB_FILES, "p/BUILD.marin": f"filegroup(name = 'g', srcs = {call})\n"})
    srcs = loader_for(ws).package("p").targets["g"].attrs["srcs"]
    assert srcs == [f"//p:{name}" for name in expected]


def test_glob_does_not_descend_into_subpackages(tmp_path):
    ws = new_workspace(
        tmp_path / "ws", {**GLOB_FILES, "p/BUILD.marin": "filegroup(name = 'g', srcs = glob(['**/*']))\n"}
    )
    srcs = loader_for(ws).package("p").targets["g"].attrs["srcs"]
    assert srcs == [
        f"//p:{name}"
        for name in [
            ".hidden.txt",
            "a.txt",
            "b.txt",
            "c.md",
            "data/deep/y.txt",
            "data/deep/z.json",
            "data/x.txt",
            "dir.txt/file.bin",
        ]
    ]
    write_files(ws, {"p/sub/BUILD.marin": "filegroup(name = 's', srcs = glob(['**/*.txt']))\n"})
    assert loader_for(ws).package("p/sub").targets["s"].attrs["srcs"] == ["//p/sub:inner/t.txt", "//p/sub:s.txt"]


def test_glob_results_are_source_files_of_the_graph(tmp_path):
    ws = new_workspace(
        tmp_path / "ws", {**GLOB_FILES, "p/BUILD.marin": "filegroup(name = 'g', srcs = glob(['data/**/*']))\n"}
    )
    graph = plan(ws, "//p:g")
    assert sorted(graph.sources) == ["//p:data/deep/y.txt", "//p:data/deep/z.json", "//p:data/x.txt"]
    assert graph.sources["//p:data/x.txt"].path == ws / "p" / "data" / "x.txt"


def test_glob_with_no_match_is_an_error_unless_allowed(tmp_path):
    ws = new_workspace(
        tmp_path / "ws", {**GLOB_FILES, "p/BUILD.marin": "filegroup(name = 'g', srcs = glob(['*.csv']))\n"}
    )
    with pytest.raises(LoadError) as caught:
        loader_for(ws).package("p")
    assert caught.value.message == "glob(['*.csv']) matched no files in //p"
    assert caught.value.hint == "pass allow_empty = True if that is expected"


def test_glob_matching_only_subpackage_files_is_empty(tmp_path):
    ws = new_workspace(
        tmp_path / "ws", {**GLOB_FILES, "p/BUILD.marin": "filegroup(name = 'g', srcs = glob(['sub/*.txt']))\n"}
    )
    with pytest.raises(LoadError) as caught:
        loader_for(ws).package("p")
    assert caught.value.message == "glob(['sub/*.txt']) matched no files in //p"


# -- loading is pure -----------------------------------------------------------------------

_PURITY_SCRIPT = textwrap.dedent(
    """\
    import importlib.util, json, sys
    from pathlib import Path
    from marinbuild.session import Session

    session = Session.open(Path(sys.argv[1]))
    graph = session.plan(["//..."])
    heavy = sorted(
        name for name in sys.modules
        if name.split(".")[0] in {"jax", "jaxlib", "levanter", "torch", "tensorflow", "transformers", "flax", "haliax"}
    )
    fakes = [name for name in ("jax", "levanter", "torch") if importlib.util.find_spec(name) is not None]
    print(json.dumps({"targets": sorted(graph.targets), "heavy": heavy, "importable": fakes}))
    """
)

_PURITY_FILES = {
    "myrules_purity.py": """\
        from marinbuild.targets import Attr, Rule
        from marinbuild.targets.attrs import INT

        def _train(ctx):
            import jax  # heavy imports belong inside impl
            import levanter

        train = Rule(name = "train", impl = _train, attrs = {"steps": Attr(INT)})
        """,
    "exp/BUILD.marin": """\
        load("//exp:defs.star", "sweep")
        sweep()
        py_step(name = "prep", fn = "steps.py:prepare", deps = glob(["*.txt"]))
        """,
    "exp/defs.star": """\
        def sweep():
            for n in (1, 2):
                train(name = "train_%d" % n, steps = n)
        """,
    "exp/steps.py": "import torch\nraise SystemExit('steps.py must not run while loading')\n",
    "exp/data.txt": "data\n",
    # Importable stand-ins: if loading imported any of these, sys.modules would show it.
    "fake_site/jax/__init__.py": "",
    "fake_site/levanter/__init__.py": "",
    "fake_site/torch/__init__.py": "",
}


def test_loading_imports_no_ml_library_and_writes_nothing(tmp_path):
    ws = new_workspace(tmp_path / "ws", _PURITY_FILES, config='rules = ["myrules_purity"]\n')
    before = {p.relative_to(ws) for p in ws.rglob("*")}
    done = subprocess.run(
        [sys.executable, "-c", _PURITY_SCRIPT, str(ws)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ws / "fake_site")},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["targets"] == ["//exp:prep", "//exp:train_1", "//exp:train_2"]
    assert result["importable"] == ["jax", "levanter", "torch"]  # so the check below means something
    assert result["heavy"] == []
    assert not (ws / "cache").exists()
    after = {p.relative_to(ws) for p in ws.rglob("*") if "__pycache__" not in p.parts and ".marinbuild" not in p.parts}
    assert after == before


def test_plan_never_opens_the_store(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": "filegroup(name = 'a', srcs = ['f'])\n", "p/f": ""})
    session = Session.open(ws, store="gs://no-such-bucket/unsupported", cwd=ws)
    assert session.plan(["//p:a"]).requested == ["//p:a"]
    local = Session.open(ws, cwd=ws)
    local.plan(["//..."])
    assert not (ws / "cache").exists()


# -- loading again after edits (each plan is a fresh session, as each CLI run is) ----------------


def _targets(ws, *patterns: str) -> dict[str, tuple[str, dict]]:
    graph = Session.open(ws, cwd=ws).plan(list(patterns))
    return {label: (str(target.location), dict(target.attrs)) for label, target in graph.targets.items()}


RELOAD_FILES = {
    "p/BUILD.marin": """\
        load("//rules:outer.star", "make")

        make(name = "gen")
        filegroup(name = "files", srcs = glob(["**/*.txt"]))
        """,
    "rules/outer.star": (
        'load(":inner.star", "CMD")\ndef make(name):\n    genrule(name = name, outs = ["o"], cmd = CMD)\n'
    ),
    "rules/inner.star": 'CMD = "echo aa > $@"\n',
    "p/a.txt": "",
    "p/d/b.txt": "",
}


def test_a_second_load_gives_the_same_targets(tmp_path):
    ws = new_workspace(tmp_path / "ws", RELOAD_FILES)
    first = _targets(ws, "//p:all")
    second = _targets(ws, "//p:all")
    assert second == first
    assert first["//p:gen"][0] == "p/BUILD.marin:3"
    assert first["//p:files"][0] == "p/BUILD.marin:4"


def test_edits_are_seen_by_the_next_load(tmp_path):
    ws = new_workspace(tmp_path / "ws", RELOAD_FILES)
    assert _targets(ws, "//p:gen")["//p:gen"][1]["cmd"] == "echo aa > $@"
    # A .star file loaded by a .star file; same size, right away.
    (ws / "rules" / "inner.star").write_text('CMD = "echo bb > $@"\n')
    assert _targets(ws, "//p:gen")["//p:gen"][1]["cmd"] == "echo bb > $@"
    # A new file matching a glob, then a subpackage that takes some files away.
    (ws / "p" / "c.txt").write_text("")
    assert _targets(ws, "//p:files")["//p:files"][1]["srcs"] == ["//p:a.txt", "//p:c.txt", "//p:d/b.txt"]
    (ws / "p" / "d" / "BUILD.marin").write_text("")
    assert _targets(ws, "//p:files")["//p:files"][1]["srcs"] == ["//p:a.txt", "//p:c.txt"]
    # The BUILD file itself: a line moves, a target is renamed.
    (ws / "p" / "BUILD.marin").write_text(
        (ws / "p" / "BUILD.marin").read_text().replace('make(name = "gen")', '\nmake(name = "gen2")')
    )
    targets = _targets(ws, "//p:all")
    assert sorted(targets) == ["//p:files", "//p:gen2"]
    assert targets["//p:gen2"][0] == "p/BUILD.marin:4"


def test_an_error_is_reported_on_every_load_until_fixed(tmp_path):
    ws = new_workspace(tmp_path / "ws", RELOAD_FILES)
    _targets(ws, "//p:all")
    (ws / "rules" / "inner.star").write_text('CMD = "echo $(X) > $@"\n')
    for _ in range(2):
        with pytest.raises(LoadError) as caught:
            _targets(ws, "//p:all")
        assert (
            str(caught.value) == "p/BUILD.marin:3: genrule 'gen': unknown variable '$(X)' in cmd; "
            "write '$$' for a literal '$' (e.g. '$$(date)')"
        )
    (ws / "rules" / "inner.star").write_text('CMD = "echo ok > $@"\n')
    assert _targets(ws, "//p:gen")["//p:gen"][1]["cmd"] == "echo ok > $@"
