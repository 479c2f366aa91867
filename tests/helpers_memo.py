"""A workspace whose rule module has a check, for the tests of the package cache and the
no-op certificate, which must both notice an edit of it.
"""

from __future__ import annotations

RULES = """\
    import os
    from pathlib import Path

    from marinbuild.targets import attrs as types
    from marinbuild.targets.attrs import Attr
    from marinbuild.targets.rule import Rule
    from myrules.checks import check


    def _write(ctx):
        (ctx.out / "text.txt").write_text(ctx.attrs["text"] + ctx.attrs["suffix"])


    def _copy(ctx):
        (ctx.out / "copy.txt").write_bytes(Path(os.environ["MEMO_TEST_INPUT"]).read_bytes())


    write_text = Rule(
        name="write_text",
        impl=_write,
        attrs={"text": Attr(types.STRING), "suffix": Attr(types.STRING, default="", omit_default=True)},
        validate=check,
    )
    # A file outside the workspace, named by the builder's environment: its content is
    # part of the key, read when the build runs, never kept in the package memo.
    from_env = Rule(
        name="from_env",
        impl=_copy,
        attrs={},
        external_inputs=lambda attrs: {"input": Path(os.environ["MEMO_TEST_INPUT"])},
    )
    """

MEMO_FILES = {
    "myrules/__init__.py": "",
    "myrules/checks.py": """\
        def check(attrs):
            if attrs["text"] == "forbidden":
                raise ValueError("text may not be 'forbidden'")
        """,
    "myrules/defs.py": RULES,
    "p/BUILD.marin": """\
        load("//lib:macros.star", "counted")
        write_text(name = "hello", text = "hi")
        counted("n", ":hello")
        genrule(name = "all", srcs = glob(["*.txt"]), outs = ["all.txt"], cmd = "cat $(SRCS) > $@")
        """,
    "p/a.txt": "a\n",
    "lib/BUILD.marin": "",
    "lib/macros.star": """\
        def counted(name, src):
            genrule(name = name, srcs = [src], outs = [name + ".txt"], cmd = "wc -c < $(SRCS) > $@")
        """,
    "q/BUILD.marin": """\
        genrule(name = "q", srcs = ["//p:n"], outs = ["q.txt"], cmd = "cat $(SRCS) > $@")
        from_env(name = "env")
        """,
}

MEMO_CONFIG = 'rules = ["myrules.defs"]\n'
