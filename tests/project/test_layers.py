"""The layers of marinbuild/ hold, and a change that breaks them is caught.

The contracts are in pyproject.toml ([tool.importlinter]); docs/concepts.md describes
the layers they enforce. `lint-imports` runs here and in .ci/run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_the_tree_keeps_every_layer_contract():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kept, 0 broken." in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("module", "forbidden_import", "contract"),
    [
        # Execution reading history back: the cycle issue #14 removed.
        (
            "marinbuild/actions/execution/scheduler.py",
            "from marinbuild.provenance import explain",
            "A build goes down the layers",
        ),
        ("marinbuild/store/action_cache.py", "from marinbuild.targets import rule", "The store stands alone"),
        ("marinbuild/hashing.py", "from marinbuild.store import layout", "Shared modules"),
        ("rules/lm/decls.py", "from marinbuild.session import Session", "Rules implement steps"),
        # The store's cycles issue #28 removed (type-only imports count): base -> live_sync ->
        # remote -> base, local_cache -> remote -> local_cache, and mirrors <-> action_cache.
        ("marinbuild/store/base.py", "from marinbuild.store.live_sync import RemoteScratch", "No import cycles"),
        ("marinbuild/store/local_cache.py", "from marinbuild.store.remote import RemoteStore", "No import cycles"),
        ("marinbuild/store/action_cache.py", "from marinbuild.store.mirrors import Mirrors", "No import cycles"),
        # The scheduler's and the command's modules: a split that goes back on itself
        # (the planner using the scheduler that composes it, what kept checkpoints need
        # reaching up to the planner that uses them, the record of a build to its runner).
        (
            "marinbuild/actions/execution/planning.py",
            "from marinbuild.actions.execution.scheduler import Scheduler",
            "No import cycles",
        ),
        (
            "marinbuild/actions/execution/checkpoint_reads.py",
            "from marinbuild.actions.execution.planning import Planner",
            "No import cycles",
        ),
        (
            "marinbuild/actions/execution/build_state.py",
            "from marinbuild.actions.execution.running import Outcome",
            "No import cycles",
        ),
        ("marinbuild/cli/base.py", "from marinbuild.cli.main import cli", "No import cycles"),
        # rules/: the two cycles of the families' move (issue #37), a step reading what it
        # needs from its rule's declaration: sft.py <-> levanter_sft.py, eval_harness.py <->
        # levanter_harness.py; a family reaching into another's steps; the cheap common
        # modules importing the Levanter runtime; a web-data block importing a step.
        ("rules/posttrain/sft_lm.py", "from rules.posttrain.decls import sft_lm", "No import cycles in rules/"),
        ("rules/evals/eval_harness.py", "from rules.evals.decls import eval_harness", "never import a family's"),
        ("rules/posttrain/sft_lm.py", "from rules.lm.train_lm import train", "A family reads another only"),
        ("rules/common/corpus.py", "from rules.common.levanter import training", "rules/common is below"),
        ("rules/webdata/blocks/documents.py", "from rules.webdata import filter_text", "webdata: declarations"),
        # The cycle issue #37 removed: the units of a sharded step typed by the context that maps them.
        ("marinbuild/targets/shards.py", "from marinbuild.targets.context import Context", "No import cycles"),
        # A build's phases: what a build is, and what it records, never reach into running it.
        (
            "marinbuild/actions/analysis/keys.py",
            "from marinbuild.actions.execution.scheduler import Scheduler",
            "A build's phases",
        ),
        (
            "marinbuild/actions/bookkeeping/results.py",
            "from marinbuild.actions.analysis.graph import Graph",
            "A build's phases",
        ),
        # The session only wires: the commands use it, never the reverse.
        ("marinbuild/session.py", "from marinbuild.commands.build import build", "A build goes down the layers"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, forbidden_import, contract):
    copy = tmp_path / "tree"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy)
    for package in ("marinbuild", "rules"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / module
    path.write_text(path.read_text() + f"\n{forbidden_import}  # added by the test\n")
    done = _lint_imports(copy)
    assert done.returncode != 0, done.stdout
    broken = done.stdout.split("Broken contracts")[-1]
    assert contract in broken, done.stdout
