"""A workspace with the lm and scaling macros, for the tests of scaling sweeps and of the
report of a fit.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls", "rules.scaling.decls"]\n'


def sweep_workspace(root: Path, build: str) -> Path:
    for star in ("lm/lm.star", "scaling/scaling.star"):
        (root / "rules" / star).parent.mkdir(parents=True)
        (root / "rules" / star).write_text((REPO / "rules" / star).read_text())
    (root / "exp").mkdir()
    (root / "exp" / "BUILD.marin").write_text(build)
    (root / "marinbuild.toml").write_text(CONFIG)
    return root
