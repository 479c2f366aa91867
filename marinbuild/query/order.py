"""The order query results are printed in: Bazel's default, a deterministic topological order.

Bazel 4 prints `label` output with `--order_output=full` unless told otherwise: sort the
targets by label, run a post-order depth-first search from each in turn (visiting
dependencies in label order too), and print the reverse of the visiting order. So a
target comes before everything it depends on, and the order never depends on hash
seeds or on how the result was computed. Edges are the result's own: a dependency
outside the result does not order anything.

Labels sort as Bazel's do: by package, then by name (so `//a:z` comes before `//a/b:x`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator


def sort_key(label: str) -> tuple[str, str]:
    package, _, name = label[2:].partition(":")
    return package, name


def dependency_order(labels: Collection[str], deps: Callable[[str], Iterable[str]]) -> list[str]:
    """`labels`, each before its dependencies (`deps(label)`, restricted to `labels`); robust to cycles."""
    members = set(labels)

    def successors(label: str) -> Iterator[str]:
        return iter(sorted((dep for dep in deps(label) if dep in members), key=sort_key))

    visited: set[str] = set()
    postorder: list[str] = []
    for root in sorted(members, key=sort_key):
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, successors(root))]
        while stack:
            label, pending = stack[-1]
            for dep in pending:
                if dep not in visited:
                    visited.add(dep)
                    stack.append((dep, successors(dep)))
                    break
            else:
                stack.pop()
                postorder.append(label)
    postorder.reverse()
    return postorder
