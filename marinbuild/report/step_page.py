"""A step's own page: what it is and where it stands, its curves, a data step's counts and
distributions, its summary, its rule's own section or its plots, every attempt with its
log, its recipe and provenance, and its outputs file by file.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from marinbuild.actions.analysis.keys import checkpoint_key
from marinbuild.provenance.data_counts import DataCounts, data_counts
from marinbuild.report import plots
from marinbuild.report.blocks import badge, duration, json_block, link, rule_section
from marinbuild.report.collect import AttemptView, StepReport
from marinbuild.sizes import human_size
from marinbuild.targets.compute import Estimate
from marinbuild.targets.distributions import Distribution, distributions
from marinbuild.targets.html_blocks import cell, image, table

_MAX_FILES_LISTED = 500


def step_page(step: StepReport) -> tuple[str, str]:
    target = step.target
    facts = [
        ("rule", escape(step.kind)),
        ("status", badge(step.status) + (f" — {escape(step.result.reason)}" if step.result.reason else "")),
        ("key", f"<code>{escape(step.key or 'pending: a dependency is not built')}</code>"),
        ("declared at", escape(str(target.location))),
        ("depends on", ", ".join(link(dep, "") for dep in step.deps) or "—"),
        ("used by", ", ".join(link(dependent, "") for dependent in step.dependents) or "—"),
    ]
    if step.last_build is not None:
        built = step.last_build
        elsewhere = f", at another key ({built.key[:12]})" if built.key and built.key != step.key else ""
        reason = f": {step.last_build_reason}" if step.last_build_reason else ""
        facts.append(("last build", escape(built.status + elsewhere + reason)))
    if step.pin is not None:
        facts.append(("external artifact", _pin_text(step.pin)))
    facts += _checkpoint_facts(step)
    if step.mirrored is not None:
        facts.append(("in a mirror", escape(step.mirrored.elsewhere())))
    if step.copied is not None:
        copied = step.copied
        facts.append(
            (
                "copied",
                escape(
                    f"from {copied['from']} ({copied['from_region']} → {copied['to_region']}), "
                    f"{human_size(copied['bytes'])}, {copied['copied']} by {copied['by']}"
                ),
            )
        )
    if target.attrs.get("description"):
        facts.append(("description", escape(target.attrs["description"])))
    body = [
        '<p><a href="../index.html">← report</a></p>',
        f"<h1>{escape(step.label)}</h1>",
        "<table>" + "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in facts) + "</table>",
    ]
    curves = plots.run_curves(step.label, step.curve_rows, target.rule.curves)
    if curves:
        body += ['<h2>Loss curves</h2><figure id="loss-curves">', plots.curves_svg(curves, step.label), "</figure>"]
    body += _summary_blocks(step)
    section = rule_section(step, "")
    if section is not None:
        body += [f"<h2>{escape(target.rule.report_section.title)}</h2>", section]  # type: ignore[union-attr]
    elif step.plots:
        body += ["<h2>Plots</h2>", "".join(image(found.path, found.data) for found in step.plots)]
    total = len(step.attempts)
    body.append(f'<h2 id="attempts">Attempts ({total})</h2>')
    body += [_attempt_block(view, number, total) for number, view in reversed(list(enumerate(step.attempts, start=1)))]
    if not step.attempts:
        body.append('<p class="meta">Never attempted in this store.</p>')
    body += ["<h2>Recipe</h2>", json_block(target.map_labels(str, identity_only=True))]
    if step.entry is not None:
        body += [
            "<details><summary>the recipe as keyed (with input digests)</summary>",
            json_block(step.entry.recipe),
            "</details>",
            "<h2>Provenance</h2>",
            json_block(step.entry.provenance),
        ]
    body += ["<h2>Outputs</h2>", _outputs_block(step)]
    return step.label, "\n".join(body)


def _summary_blocks(step: StepReport) -> list[str]:
    """A data step's documents and filters, the distributions it cut on, and its summary
    metrics (the file its rule declares)."""
    metrics_file = step.target.rule.metrics_file
    summary = step.json_file(metrics_file) if metrics_file else None
    if not isinstance(summary, dict):
        return []
    blocks = []
    counts = data_counts(summary)
    if counts is not None:
        blocks += ['<h2 id="documents">Documents</h2>', _data_block(counts)]
    cuts = distributions(summary)
    if cuts is not None:
        blocks += ['<h2 id="distributions">Distributions</h2>', _distributions_block(cuts)]
    return [*blocks, f"<h3>{metrics_file}</h3>", json_block(summary)]


def _estimate(recorded: dict[str, Any] | None, duration_s: float | None) -> str | None:
    """What the build assumed a training would cost, beside what it took (targets/compute.py)."""
    return None if not recorded else Estimate.from_json(recorded).against(duration_s)


def _attempt_block(view: AttemptView, number: int, total: int) -> str:
    record = view.record
    failed = record.status.value != "succeeded"
    facts = [
        ("status", record.status.value),
        ("started", record.started),
        ("finished", record.finished),
        ("duration", duration(record.duration_s)),
        ("estimate", _estimate(record.record.get("estimate"), record.duration_s)),
        ("host", record.host),
        ("ran on", record.where() if record.executor is not None else None),
        ("user", record.user),
        ("exit status", record.exit_status),
        ("error", record.error),
        ("key", record.key),
        ("invocation", record.invocation),
    ]
    rows = "".join(
        f"<tr><th>{name}</th><td>{escape(str(value))}</td></tr>" for name, value in facts if value not in (None, "")
    )
    log = (
        f'<pre class="log">{escape(view.log_tail)}</pre>'
        if view.log_tail is not None
        else '<p class="meta">no log stored</p>'
    )
    return (
        f'<details class="attempt attempt-{record.status.value}" '
        f'id="attempt-{escape(record.attempt_id)}"{" open" if failed else ""}>'
        f"<summary>attempt {number} of {total}: <b>{escape(record.status.value)}</b>, {escape(record.started or '')}, "
        f"{escape(duration(record.duration_s))} on {escape(record.where(short=True))}</summary>"
        f'<table>{rows}</table><p class="meta">log tail:</p>{log}'
        f"<details><summary>the whole record (provenance)</summary>{json_block(record.to_json())}</details></details>"
    )


def _pin_text(description: dict[str, Any]) -> str:
    pin = description["pin"]
    where = f"<code>{escape(description['url'])}</code>"
    if pin is None:
        return f"{where}, not pinned"
    state = "" if description["current"] else " — <strong>changed since</strong>"
    return (
        f"{where}: {pin['objects']:,} objects, {human_size(pin['bytes'])}, pinned {escape(pin['pinned'])} "
        f"by {escape(pin['by'])} (digest <code>{escape(pin['digest'][:16])}</code>){state}"
    )


def _checkpoint_facts(step: StepReport) -> list[tuple[str, str]]:
    """The checkpoints a training keeps (each an entry of its own, by key), and the one a
    target reads instead of a whole output (docs/checkpoints.md)."""
    target, facts = step.target, []
    kept = target.attrs[target.rule.keeps_checkpoints] if target.rule.keeps_checkpoints else None
    if kept:
        shown = [
            f"step {at}" + (f" <code>{escape(checkpoint_key(step.key, at)[:12])}</code>" if step.key else "")
            for at in kept
        ]
        facts.append(("kept checkpoints", ", ".join(shown)))
    for attr, (label, at) in target.steps_read().items():
        facts.append((escape(attr), f"the checkpoint {link(label, '')} keeps at step {at}"))
    return facts


def _outputs_block(step: StepReport) -> str:
    """The manifest summed up by top-level file or directory, then every file (folded)."""
    if step.pin is not None:
        return '<p class="meta">An external artifact, read where it lives (nothing copied).</p>'
    if step.entry is None:
        return (
            f'<p class="meta">No output under the current key ({escape(step.result.reason or step.status.value)}).</p>'
        )
    manifest = step.entry.manifest
    groups: dict[str, list[int]] = {}
    for item in manifest.files:
        top, _, rest = item.path.partition("/")
        counted = groups.setdefault(top + "/" if rest else top, [0, 0])
        counted[0] += 1
        counted[1] += item.size
    summary = [[f"<td>{escape(name)}</td>", cell(files), cell(size)] for name, (files, size) in groups.items()]
    listed = manifest.files[:_MAX_FILES_LISTED]
    every = [
        [f"<td>{escape(item.path)}</td>", cell(item.size), f"<td><code>{escape(item.digest[:16])}</code></td>"]
        for item in listed
    ]
    more = f" (the first {len(listed)})" if len(listed) < len(manifest.files) else ""
    parts = [
        f"<p>{len(manifest.files):,} files, {human_size(manifest.total_bytes)}; "
        f"tree digest <code>{escape(step.entry.tree_digest[:16])}</code></p>",
        table(["output", "files", "bytes"], summary, "outputs-table"),
        f"<details><summary>every file{more}</summary>{table(['file', 'bytes', 'blake3'], every)}</details>",
    ]
    if step.unreadable:
        parts.append(
            '<p class="error">Did not match the manifest when read for this report: '
            f"{escape(', '.join(step.unreadable))}</p>"
        )
    return "\n".join(parts)


def _data_block(counts: DataCounts) -> str:
    """A data step's documents per split, each filter's counts in chain order, and its skips."""
    splits = ", ".join(f"{escape(split)} {count:,}" for split, count in counts.documents)
    parts = [f"<p>{counts.total_documents:,} documents ({splits}).</p>"]
    if counts.filters:
        rows = [
            [
                f"<td>{escape(item.name)}</td>",
                cell(item.seen),
                cell(item.kept),
                cell(None if item.kept_share is None else round(100 * item.kept_share, 1)),
                cell(item.rejected),
                cell(", ".join(f"{reason} {count:,}" for reason, count in item.reasons)),
            ]
            for item in counts.filters
        ]
        parts += [
            '<p class="meta">Filters in chain order: each sees what those before it kept.</p>',
            table(["filter", "seen", "kept", "kept %", "rejected", "rejected by reason"], rows, "filters-table"),
        ]
    if counts.skipped:
        rows = [[cell(item.reason), cell(item.count), cell(item.first)] for item in counts.skipped]
        parts += [
            f'<p class="meta">{counts.total_skipped:,} inputs passed over, by reason.</p>',
            table(["skipped", "count", "first met at"], rows, "skipped-table"),
        ]
    return "\n".join(parts)


def _distributions_block(cuts: Sequence[Distribution]) -> str:
    """What a step cut on: a histogram each, its threshold a line, its quantiles below it."""
    parts = ['<p class="meta">What the step cut on, over every document: the threshold is the dashed line.</p>']
    for cut in cuts:
        kept = cut.cut()
        caption = f"{cut.name}: {cut.summary()}" + (f"; {kept}" if kept else "")
        svg = plots.histogram_svg(cut)
        parts.append(f'<figure class="distribution">{svg}<figcaption>{escape(caption)}</figcaption></figure>')
    return "\n".join(parts)
