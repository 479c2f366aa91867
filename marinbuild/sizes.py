"""Sizes as a person reads them, wherever marinbuild shows one: a step's transfers as they
run, the files of an output in a report. (An egress budget is a cloud bill's GB:
store/mirrors.py's `format_bytes`.)"""

from __future__ import annotations

BYTES = "B"  # the unit of a progress report counted in bytes (cli/progress.py shows it as sizes)


def human_size(size: float) -> str:
    """`0 B`, `11 B`, `1.5 KiB`, `10.0 MiB`, `1,234.5 GiB`: binary units, one decimal past bytes."""
    for unit in (BYTES, "KiB", "MiB"):
        if size < 1024:
            return f"{size:,.0f} {unit}" if unit == BYTES else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"
