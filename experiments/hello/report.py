"""A py_step: gathers the pipeline's outputs into one JSON report."""

import json


def write_report(ctx):
    greeting = ctx.location("//experiments/hello:greeting").read_text().strip()
    count = int(ctx.location("//experiments/hello:count").read_text())
    ctx.log.info("greeting has %d words", count)
    report = {"title": ctx.attrs["config"]["title"], "greeting": greeting, "words": count}
    (ctx.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
