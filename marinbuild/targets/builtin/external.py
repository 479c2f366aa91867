"""`external`: data that already exists — a bucket of tokenized documents, a checkpoint —
named as a target, so that experiments depend on it like on any output.

It never runs. `marinbuild pin LABEL` lists what its URL holds (names, sizes, checksums:
nothing is downloaded) and records the listing's digest in `marinbuild.lock`; that digest
is its output digest, so dependents are cached exactly as for a built output. Steps that
read URLs read it in place; a build stops if the objects changed since they were pinned.
"""

from __future__ import annotations

from collections.abc import Mapping

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import Rule


def _never_runs(ctx: Context) -> None:
    raise StepFailed(f"{ctx.label} is an external artifact: it is pinned (marinbuild pin), never built")


def _check_url(attrs: Mapping[str, JsonValue]) -> None:
    url = attrs["url"]
    if not (url.startswith("gs://") or url.startswith("/")):
        raise ValueError(f"url: {url!r} is neither a gs:// URL nor an absolute path of this machine")
    if url.startswith("gs://") and "/" not in url.removeprefix("gs://").strip("/"):
        raise ValueError(f"url: {url!r} names a whole bucket; name the directory (gs://bucket/prefix)")


external = Rule(
    name="external",
    impl=_never_runs,
    doc="Data that already exists at a gs:// URL or a local directory, pinned by `marinbuild pin`.",
    attrs={"url": Attr(types.STRING, doc="gs://bucket/prefix, or an absolute directory of this machine.")},
    validate=_check_url,
    pinned=True,
)
