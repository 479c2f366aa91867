"""How `log`, `history` and `explain` print what the store records."""

from __future__ import annotations

import json

from marinbuild.actions.keys import short
from marinbuild.provenance import AttemptRecord, HistoryItem
from marinbuild.provenance.explain import Explanation


def attempt_line(record: AttemptRecord) -> str:
    """One line per attempt: when, result, where, how long, and the error of a failure."""
    parts = [
        record.started or "?",
        f"{record.status.value:10}",
        record.label,
        f"key {short(record.key)}",
        f"attempt {record.attempt_id}",
        f"{record.user or '?'}@{record.host or '?'}",
    ]
    if record.duration_s is not None:
        parts.append(f"{record.duration_s:.1f}s")
    if record.exit_status is not None:
        parts.append(f"exit status {record.exit_status}")
    if record.aside:
        parts.append(f"(aside: {record.aside}, not published)")
    line = "  ".join(parts)
    if record.error:
        line += f"\n      {record.error.splitlines()[0]}"
    return line


def log_header(record: AttemptRecord, number: int, total: int) -> str:
    return f"attempt {number} of {total}: {attempt_line(record)}"


def history_lines(items: list[HistoryItem]) -> list[str]:
    lines = []
    for item in items:
        invocation = item.invocation
        counts = ", ".join(
            f"{count} {status}" for status, count in invocation.record.get("counts", {}).items() if count
        )
        lines.append(
            f"{invocation.started or '?'}  {invocation.result:11}  {invocation.user or '?'}@{invocation.host or '?'}"
            f"  {invocation.command} {' '.join(invocation.patterns)}  ({counts or 'nothing done'})"
            f"  invocation {invocation.invocation_id}"
        )
        for outcome, attempt in item.outcomes:
            line = f"    {outcome.status:8} {outcome.label}"
            if outcome.key:
                line += f"  key {short(outcome.key)}"
            if attempt is not None:
                line += f"  attempt {attempt.attempt_id}"
                if attempt.duration_s is not None:
                    line += f"  {attempt.duration_s:.1f}s"
                if attempt.error:
                    line += f"\n        {attempt.error.splitlines()[0]}"
            lines.append(line)
    return lines


def explanation_lines(explanation: Explanation, indent: str = "") -> list[str]:
    lines = [f"{indent}{explanation.label}: {explanation.summary}"]
    if explanation.key:
        lines.append(f"{indent}  key {explanation.key}")
    if explanation.changes:
        lines.append(f"{indent}  changed since {short(explanation.previous_key or '')}:")
        lines += [f"{indent}    {change}" for change in explanation.changes]
    if explanation.ingredients:
        lines.append(f"{indent}  ingredients of its key:")
        lines += [f"{indent}    {item}" for item in explanation.ingredients]
    for upstream in explanation.upstream:
        lines += explanation_lines(upstream, indent + "  ")
    return lines


def show_lines(description: dict) -> list[str]:
    recipe = description["recipe"]
    lines = [
        f"{description['label']}",
        f"  key          {description['key']}",
        f"  tree digest  {description['tree_digest']}",
        f"  rule         {recipe['rule']} version {recipe['version']}",
    ]
    if recipe.get("salt"):
        lines.append(f"  store salt   {recipe['salt']!r}")
    lines.append("  attributes")
    lines += [f"    {name} = {json.dumps(value)}" for name, value in recipe["attrs"].items()]
    if recipe["inputs"]:
        lines.append("  inputs")
        lines += _input_lines(recipe["inputs"], "    ")
    lines.append("  provenance")
    lines += [
        f"    {name}: {json.dumps(value) if isinstance(value, dict) else value}"
        for name, value in description["provenance"].items()
    ]
    lines.append(f"  outputs ({len(description['outputs'])} files, {description['total_bytes']:,} bytes)")
    lines += [
        f"    {item['path']}  {item['size']:,} bytes  {short(item['blake3'])}"
        for item in description["outputs"][:_FILES_SHOWN]
    ]
    if len(description["outputs"]) > _FILES_SHOWN:
        lines.append(f"    ... and {len(description['outputs']) - _FILES_SHOWN} more (--json lists them all)")
    if description["metrics"]:
        lines.append("  metrics")
        lines += [f"    {name}: {value}" for name, value in description["metrics"].items()]
    if description["measured"]:
        lines.append("  measured by the attempt that built it (not part of the output)")
        lines += [f"    {name}: {value}" for name, value in description["measured"].items()]
    return lines


_FILES_SHOWN = 20


def _input_lines(inputs: dict, indent: str) -> list[str]:
    lines = []
    for label, item in inputs.items():
        if "source" in item:
            lines.append(f"{indent}{label}  source {short(item['source'])}")
            continue
        lines.append(f"{indent}{label}  output {short(item['tree_digest'])} of key {short(item['key'])}")
        made_by = item.get("made_by")
        if made_by and "error" in made_by:
            lines.append(f"{indent}  ({made_by['error']})")
        elif made_by:
            lines.append(
                f"{indent}  {made_by['recipe']['rule']} version {made_by['recipe']['version']}, "
                f"built {made_by['provenance'].get('finished', '?')}"
            )
            lines += _input_lines(made_by["recipe"]["inputs"], indent + "  ")
    return lines
