"""Generate a deterministic random DAG of trivial build steps for three tools.

The same DAG is written three times so that marinbuild can be compared with
its peers on identical work:

* ``<root>/marinbuild``: a marinbuild workspace (``marinbuild.toml`` plus one
  ``BUILD.marin`` of genrules per package ``p0 .. pN``);
* ``<root>/dvc``: a DVC pipeline (one stage per target; the repository itself
  is initialised by the benchmark runner with ``dvc init --no-scm`` because
  that needs the DVC executable);
* ``<root>/snakemake``: a Snakefile with one generic rule driven by a lookup
  table in ``dag.json``: the same DAG and commands without making Snakemake
  parse thousands of rule definitions.

Every target's command reads all of its inputs and writes a two-line file:
``cat INPUTS | cksum > OUT && echo I >> OUT`` (or ``echo I > OUT`` without
inputs).  Plain ``cat INPUTS > OUT`` is not usable: with 0-3 inputs per
target, output sizes grow geometrically along dependency chains and a
10,000-target DAG would need petabytes.  ``cksum`` keeps each output tiny
while still making it depend on the content of every input.

Usage: ``python bench/gen_workspace.py ROOT [--targets N] [--packages P]
[--seed S] [--dvc-layout {per-package,single}]``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TARGETS = 10_000
DEFAULT_PACKAGES = 500
DEFAULT_SEED = 0
MAX_DEPS = 3
# Where a dependency is drawn from: mostly the same package, often one of the
# NEARBY_PACKAGES previous packages, sometimes anywhere earlier in the DAG.
SAME_PACKAGE_P = 0.6
NEARBY_PACKAGE_P = 0.3
NEARBY_PACKAGES = 3
DVC_LAYOUTS = ("per-package", "single")


@dataclass(frozen=True)
class Target:
    """One build step: target ``t{index}`` in package ``p{package}``."""

    index: int
    package: int
    deps: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"t{self.index}"

    @property
    def package_dir(self) -> str:
        return f"p{self.package}"

    @property
    def out_file(self) -> str:
        return f"t{self.index}.txt"

    @property
    def out_path(self) -> str:
        """Output path relative to the workspace root (DVC and Snakemake)."""
        return f"{self.package_dir}/{self.out_file}"


def package_of(index: int, targets: int, packages: int) -> int:
    """Package holding target ``index``; spreads targets evenly, in order."""
    return index * packages // targets


def first_target_of(package: int, targets: int, packages: int) -> int:
    """Smallest target index that ``package_of`` maps to ``package``."""
    return -(-package * targets // packages)


def pick_dep(rng: random.Random, index: int, package: int, targets: int, packages: int) -> int:
    """Draw one earlier target, favouring the same and nearby packages."""
    roll = rng.random()
    if roll < SAME_PACKAGE_P:
        low = first_target_of(package, targets, packages)
    elif roll < SAME_PACKAGE_P + NEARBY_PACKAGE_P:
        low = first_target_of(max(0, package - NEARBY_PACKAGES), targets, packages)
    else:
        low = 0
    if low >= index:  # first target of its package: nothing local to depend on
        low = 0
    return rng.randrange(low, index)


def generate_dag(targets: int, packages: int, seed: int) -> list[Target]:
    """Build the DAG; deps always point to lower indices, so it is acyclic."""
    if not 1 <= packages <= targets:
        raise ValueError(f"need 1 <= packages ({packages}) <= targets ({targets})")
    rng = random.Random(seed)
    dag = []
    for index in range(targets):
        package = package_of(index, targets, packages)
        wanted = min(rng.randint(0, MAX_DEPS), index)
        deps = {pick_dep(rng, index, package, targets, packages) for _ in range(wanted)}
        dag.append(Target(index, package, tuple(sorted(deps))))
    return dag


def shell_command(index: int, inputs: Sequence[str], output: str) -> str:
    """The one command shape every tool runs (see module docstring for why)."""
    if not inputs:
        return f"echo {index} > {output}"
    return f"cat {' '.join(inputs)} | cksum > {output} && echo {index} >> {output}"


def by_package(dag: Sequence[Target]) -> dict[int, list[Target]]:
    """Group targets per package, keeping DAG order."""
    groups: dict[int, list[Target]] = {}
    for target in dag:
        groups.setdefault(target.package, []).append(target)
    return groups


def marinbuild_label(dep: Target, from_package: int) -> str:
    """Package-relative label for same-package deps, absolute otherwise."""
    if dep.package == from_package:
        return f":{dep.name}"
    return f"//{dep.package_dir}:{dep.name}"


def genrule(target: Target, dag: Sequence[Target]) -> str:
    """One Starlark genrule; the command uses marinbuild's $(SRCS) and $@."""
    srcs = [marinbuild_label(dag[d], target.package) for d in target.deps]
    cmd = shell_command(target.index, ["$(SRCS)"] if srcs else [], "$@")
    return (
        "genrule(\n"
        f"    name = {json.dumps(target.name)},\n"
        f"    srcs = {json.dumps(srcs)},\n"
        f"    outs = [{json.dumps(target.out_file)}],\n"
        f"    cmd = {json.dumps(cmd)},\n"
        ")\n"
    )


def write_marinbuild(dag: Sequence[Target], root: Path) -> None:
    """Write a marinbuild workspace: empty marinbuild.toml + one BUILD per package."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "marinbuild.toml").write_text("")
    for package, members in by_package(dag).items():
        package_dir = root / f"p{package}"
        package_dir.mkdir(exist_ok=True)
        rules = "\n".join(genrule(t, dag) for t in members)
        (package_dir / "BUILD.marin").write_text(rules)


def relative_path(path: str, from_dir: str) -> str:
    """``path`` (workspace-relative) as seen from workspace dir ``from_dir``."""
    if not from_dir:
        return path
    package, _, file = path.partition("/")
    return file if package == from_dir else f"../{path}"


def dvc_stage(target: Target, dag: Sequence[Target], wdir: str) -> str:
    """One dvc.yaml stage; strings are JSON-quoted, which YAML accepts."""
    deps = [relative_path(dag[d].out_path, wdir) for d in target.deps]
    out = relative_path(target.out_path, wdir)
    lines = [
        f"  {target.name}:",
        f"    cmd: {json.dumps(shell_command(target.index, deps, out))}",
    ]
    if deps:
        lines.append("    deps:")
        lines.extend(f"    - {json.dumps(dep)}" for dep in deps)
    lines.append("    outs:")
    lines.append(f"    - {json.dumps(out)}")
    return "\n".join(lines) + "\n"


def dvc_yaml(targets: Sequence[Target], dag: Sequence[Target], wdir: str) -> str:
    return "stages:\n" + "".join(dvc_stage(t, dag, wdir) for t in targets)


def write_dvc(dag: Sequence[Target], root: Path, layout: str = "per-package") -> None:
    """Write the DVC pipeline.

    ``per-package`` (default) mirrors marinbuild's layout with one dvc.yaml
    per package directory; it is also the layout DVC handles fastest, because
    after every stage it runs DVC re-reads and rewrites that pipeline's whole
    dvc.lock, which is quadratic with one 10k-stage lock file (about 5x slower
    per stage already at 200 stages).  ``single`` puts every stage
    in one root dvc.yaml.  Run with ``dvc repro --all-pipelines`` either way.
    """
    if layout not in DVC_LAYOUTS:
        raise ValueError(f"unknown DVC layout {layout!r}")
    root.mkdir(parents=True, exist_ok=True)
    groups = by_package(dag)
    for package in groups:  # DVC does not create the parent dirs of outs
        (root / f"p{package}").mkdir(exist_ok=True)
    if layout == "single":
        (root / "dvc.yaml").write_text(dvc_yaml(dag, dag, wdir=""))
        return
    for package, members in groups.items():
        (root / f"p{package}" / "dvc.yaml").write_text(dvc_yaml(members, dag, f"p{package}"))


SNAKEFILE = """\
# Generated by bench/gen_workspace.py: one generic rule, DAG in dag.json.
import json

with open(workflow.basedir + "/dag.json") as f:
    TARGETS = json.load(f)  # not "DAG": that would shadow Snakemake's own class

wildcard_constraints:
    pkg=r"p\\d+",
    idx=r"\\d+",

rule all:
    input: list(TARGETS)

rule genrule:
    input: lambda w: TARGETS[f"{w.pkg}/t{w.idx}.txt"]["deps"]
    output: "{pkg}/t{idx}.txt"
    params: cmd=lambda w: TARGETS[f"{w.pkg}/t{w.idx}.txt"]["cmd"]
    shell: "{params.cmd}"
"""


def write_snakemake(dag: Sequence[Target], root: Path) -> None:
    """Write Snakefile + dag.json mapping each output to its deps and command."""
    root.mkdir(parents=True, exist_ok=True)
    table = {}
    for target in dag:
        deps = [dag[d].out_path for d in target.deps]
        table[target.out_path] = {
            "deps": deps,
            "cmd": shell_command(target.index, deps, target.out_path),
        }
    (root / "dag.json").write_text(json.dumps(table))
    (root / "Snakefile").write_text(SNAKEFILE)


TOOLS = ("marinbuild", "dvc", "snakemake")


def generate(
    root: Path,
    targets: int = DEFAULT_TARGETS,
    packages: int = DEFAULT_PACKAGES,
    seed: int = DEFAULT_SEED,
    tools: Sequence[str] = TOOLS,
    dvc_layout: str = "per-package",
) -> list[Target]:
    """Write ``<root>/<tool>`` for each requested tool; returns the DAG."""
    dag = generate_dag(targets, packages, seed)
    if "marinbuild" in tools:
        write_marinbuild(dag, root / "marinbuild")
    if "dvc" in tools:
        write_dvc(dag, root / "dvc", dvc_layout)
    if "snakemake" in tools:
        write_snakemake(dag, root / "snakemake")
    return dag


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="output directory")
    parser.add_argument("--targets", type=int, default=DEFAULT_TARGETS, help="default: %(default)s")
    parser.add_argument("--packages", type=int, default=DEFAULT_PACKAGES, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="default: %(default)s")
    parser.add_argument(
        "--tools",
        nargs="+",
        choices=TOOLS,
        default=list(TOOLS),
        help="which tool layouts to write (default: all)",
    )
    parser.add_argument("--dvc-layout", choices=DVC_LAYOUTS, default="per-package")
    args = parser.parse_args(argv)
    if not 1 <= args.packages <= args.targets:
        parser.error("need 1 <= --packages <= --targets")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    dag = generate(args.root, args.targets, args.packages, args.seed, args.tools, args.dvc_layout)
    edges = sum(len(t.deps) for t in dag)
    print(
        f"wrote {len(dag)} targets, {edges} edges, {args.packages} packages "
        f"for {', '.join(args.tools)} under {args.root}"
    )


if __name__ == "__main__":
    main()
