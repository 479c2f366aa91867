"""The mixture rules, which the macros of mixtures.star declare (docs/mixtures.md):

- `mixture_draw`: one swarm run's mixture, drawn around the prior under the repetition cap;
- `mixture_table`: the swarm's weights and losses (swarm.json, ratios.csv, metrics.csv);
- `mixture_fit`: the law from weights to the target loss and its proposal (fit.json, and
  mixture.json for `train_lm(mixture = ...)`);
- `mixture_pick`: a reference mixture the fit names (the swarm's best, the prior, uniform);
- `mixture_check`: the proposal and the references trained, at each scale (validation.json).

Declared here, cheap to import; the steps (draws.py, table.py, fit.py, check.py, plots.py)
are imported when they run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.outputs import ReportSection
from marinbuild.targets.rule import Execution, Resources, Rule
from rules.common.headline import json_headline
from rules.common.mixture_file import MIXTURE_FILE
from rules.common.ranges import check_attrs
from rules.mixtures.constants import (
    CHECK_FILE,
    FIT_FILE,
    METRICS_CSV,
    PREDICTED_PLOT,
    RATIOS_CSV,
    SWARM_PLOT,
    TABLE_FILE,
    VALIDATION_PLOT,
)

REGRESSIONS = ("log_linear", "lightgbm")  # checked at load; regression.py fits them
PICKS = ("proposal", "best_run", "prior", "uniform")
_STEPS = ("rules.mixtures.draws", "rules.mixtures.table", "rules.mixtures.fit", "rules.mixtures.check")
_FIT_MODULES = (*_STEPS, "rules.mixtures.regression", "rules.mixtures.proposer", "rules.mixtures.plots")


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=False) + "\n")


def _weights_shown(weights: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {weight:.3f}" for name, weight in weights.items())


# -- mixture_draw ------------------------------------------------------------------------------


def _check_prior(prior: JsonValue, names: list[str]) -> None:
    if prior in ("tokens", "uniform"):
        return
    if not isinstance(prior, dict) or not prior:
        raise ValueError(f'prior: expected "tokens", "uniform" or {{source: share}}, got {prior!r}')
    unknown = sorted(set(prior) - set(names))
    if unknown:
        raise ValueError(f"prior: {unknown} are not sources of this swarm (its sources: {names})")
    for name, share in prior.items():
        if isinstance(share, bool) or not isinstance(share, (int, float)) or share < 0:
            raise ValueError(f"prior: the share of {name} must be a non-negative number, got {share!r}")
    if not any(prior.values()):
        raise ValueError("prior: at least one share must be positive")


def _validate_draw(attrs: Mapping[str, JsonValue]) -> None:
    names = attrs["names"]
    if len(names) != len(attrs["sources"]):
        raise ValueError("sources and names go together: a short name for each source")
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"sources: a mixture needs two sources at least, each named once; got {names}")
    _check_prior(attrs["prior"], names)
    check_attrs("mixture_draw", attrs)


def _draw(ctx: Context) -> None:
    from rules.mixtures.draws import (
        caps,
        check_one_tokenizer,
        check_room,
        draw,
        mixture_record,
        prior_shares,
        read_source,
    )

    attrs = ctx.attrs
    sources = [read_source(label, name, ctx.url(label)) for label, name in zip(attrs["sources"], attrs["names"])]
    check_one_tokenizer(sources)
    limits = caps(sources, attrs["tokens"], attrs["max_repetition"])
    check_room(sources, limits, attrs["tokens"], attrs["max_repetition"])
    prior = prior_shares(attrs["prior"], sources)
    weights, attempts = draw(prior, limits, attrs["concentration"], attrs["seed"], attrs["draw"])
    record = mixture_record(
        sources,
        weights,
        prior,
        attrs["tokens"],
        attrs["max_repetition"],
        draw=attrs["draw"],
        seed=attrs["seed"],
        concentration=attrs["concentration"],
        attempts=attempts,
    )
    _write_json(ctx.out / MIXTURE_FILE, record)
    ctx.log.info("draw %d: %s (%d tries)", attrs["draw"], _weights_shown(dict(zip(record["prior"], weights))), attempts)


def _mixture_headline(out: Path) -> str | None:
    def describe(mixture: Mapping[str, Any]) -> str:
        names = mixture["names"]
        shown = _weights_shown({names[label]: weight for label, weight in mixture["weights"].items()})
        return f"{shown}; at most {max(mixture['repetition'].values()):.2f} repetitions ({MIXTURE_FILE})"

    return json_headline(out / MIXTURE_FILE, describe)


# Two lists, not {target: name}: attributes whose labels are values, not keys, key through
# the fast identity template (marinbuild/targets/identity.py).
SOURCES_ATTR = Attr(types.LABEL_LIST, doc="The tokenize targets a mixture weighs.")
NAMES_ATTR = Attr(types.STRING_LIST, doc="Each source's short name, in the same order (the weight columns).")
TOKENS_DOC = "The training tokens of the run the mixture is for (steps x batch x sequence length): the caps are for it."

mixture_draw = Rule(
    name="mixture_draw",
    impl=_draw,
    doc="One mixture of a swarm: draw `draw` of `seed`, Dirichlet around the prior, under the repetition cap "
    "-> mixture.json (train_lm's `mixture`).",
    attrs={
        "sources": SOURCES_ATTR,
        "names": NAMES_ATTR,
        "prior": Attr(types.JSON, default="tokens", doc='"tokens" (their token counts), "uniform", or {name: share}.'),
        "draw": Attr(types.INT, doc="Which draw: each has a generator of its own (seed, draw)."),
        "seed": Attr(types.INT, default=0),
        "concentration": Attr(
            types.FLOAT,
            default=1.0,
            doc="Dirichlet(concentration x sources x prior): 1 about a uniform prior is uniform over mixtures; "
            "more stays nearer the prior.",
        ),
        "max_repetition": Attr(types.FLOAT, default=4.0, doc="No source seen more than this many times by the run."),
        "tokens": Attr(types.INT, doc=TOKENS_DOC),
    },
    validate=_validate_draw,
    headline=_mixture_headline,
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=1),
    reads_urls=True,  # a token cache's summary and tokenizer only, not its tokens
    code_modules=("rules.mixtures.draws", "rules.common.mixture_file"),
)


# -- mixture_table -----------------------------------------------------------------------------


def _check_aligned(attrs: Mapping[str, JsonValue], first: str, runs: str) -> None:
    """`first`, `mixtures` and `evals` list one item per run, in the same order."""
    if not len(attrs[first]) == len(attrs["mixtures"]) == len(attrs["evals"]):
        raise ValueError(f"{first}, mixtures and evals go together: one of each per {runs}")


def _trained_runs(mixtures: str) -> dict[str, Attr]:
    """The attributes of a rule that reads trained runs: each one's mixture and evaluation."""
    return {
        "mixtures": Attr(types.LABEL_LIST, doc=f"Each run's {mixtures}."),
        "evals": Attr(types.LABEL_LIST, doc="Each run's eval_lm target."),
    }


def _validate_table(attrs: Mapping[str, JsonValue]) -> None:
    _check_aligned(attrs, "runs", "run of the swarm")


def _table(ctx: Context) -> None:
    from rules.mixtures.table import gather, olmix_csvs

    table = gather(
        ctx.attrs["runs"],
        [(label, ctx.root(label)) for label in ctx.attrs["mixtures"]],
        [(label, ctx.root(label)) for label in ctx.attrs["evals"]],
    )
    _write_json(ctx.out / TABLE_FILE, table)
    ratios, metrics = olmix_csvs(table)
    (ctx.out / RATIOS_CSV).write_text(ratios)
    (ctx.out / METRICS_CSV).write_text(metrics)
    ctx.log.info("%d runs of %s, evaluated on %s", len(table["runs"]), table["sources"], table["evals"])


def _table_headline(out: Path) -> str | None:
    def describe(table: Mapping[str, Any]) -> str:
        return (
            f"{len(table['runs'])} runs mixing {', '.join(table['sources'])}; {TABLE_FILE}, {RATIOS_CSV}, {METRICS_CSV}"
        )

    return json_headline(out / TABLE_FILE, describe)


mixture_table = Rule(
    name="mixture_table",
    impl=_table,
    doc="A swarm's table: each run's weights and its losses on the evaluation sets -> swarm.json, ratios.csv, "
    "metrics.csv.",
    attrs={
        "runs": Attr(types.STRING_LIST, doc="The runs' names, a row each."),
        **_trained_runs("mixture_draw target"),
    },
    validate=_validate_table,
    headline=_table_headline,
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=1),
    code_modules=("rules.mixtures.table",),
)


# -- mixture_fit -------------------------------------------------------------------------------


def _check_target(target: JsonValue) -> None:
    if isinstance(target, str) and target:
        return
    if not isinstance(target, dict) or not target:
        raise ValueError(f"target: expected an evaluation set's name or {{name: weight}}, got {target!r}")
    for name, weight in target.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise ValueError(f"target: the weight of {name} must be a positive number, got {weight!r}")


def _validate_fit(attrs: Mapping[str, JsonValue]) -> None:
    if attrs["regression"] not in REGRESSIONS:
        raise ValueError(f"regression: expected one of {', '.join(REGRESSIONS)}, got {attrs['regression']!r}")
    _check_target(attrs["target"])
    check_attrs("mixture_fit", attrs)


def _fit(ctx: Context) -> None:
    from rules.mixtures import plots
    from rules.mixtures.fit import Settings, fit
    from rules.mixtures.table import read_json

    attrs = ctx.attrs
    table = read_json(ctx.root(attrs["swarm"]), TABLE_FILE, attrs["swarm"], "a fit's swarm is a mixture_table target")
    target = attrs["target"]
    settings = Settings(
        regression=attrs["regression"],
        target={target: 1.0} if isinstance(target, str) else target,
        kl_weight=attrs["kl_weight"],
        max_repetition=attrs["max_repetition"] or table["max_repetition"],
        run_tokens=attrs["tokens"] or table["run_tokens"],
        seed=attrs["seed"],
        bootstrap=attrs["bootstrap"],
    )
    found, mixture = fit(table, settings)
    _write_json(ctx.out / FIT_FILE, found)
    _write_json(ctx.out / MIXTURE_FILE, mixture)
    plots.swarm(found, None, ctx.out / SWARM_PLOT)
    plots.predicted(found, None, ctx.out / PREDICTED_PLOT)
    ctx.log.info("%s", _describe_fit(found))


def _describe_fit(fit: Mapping[str, Any]) -> str:
    proposal, interval = fit["proposal"], fit["proposal"]["interval"]
    shown = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
    return (
        f"{fit['regression']}: leave-one-out error {100 * fit['loo']['mean_relative_error']:.2f}% "
        f"(rmse {fit['loo']['rmse']:.4f}); proposal {_weights_shown(proposal['weights'])}, predicted loss "
        f"{proposal['predicted']:.3f}{shown}; best run {fit['best_run']['run']} {fit['best_run']['loss']:.3f} "
        f"({FIT_FILE}, {MIXTURE_FILE})"
    )


mixture_fit = Rule(
    name="mixture_fit",
    impl=_fit,
    doc="Fit a law from a swarm's mixtures to its target loss and propose the mixture it predicts best -> fit.json, "
    "mixture.json (the proposal, for train_lm's `mixture`), swarm.png, predicted.png.",
    attrs={
        "swarm": Attr(types.LABEL, doc="A mixture_table target."),
        "target": Attr(types.JSON, doc="An evaluation set's name, or {name: weight}: a weighted mean of several."),
        "regression": Attr(types.STRING, default="log_linear", doc=f"One of {', '.join(REGRESSIONS)}."),
        "kl_weight": Attr(
            types.FLOAT, default=0.0, doc="Pull towards the prior: the proposal minimises loss + kl_weight x KL."
        ),
        "max_repetition": Attr(types.FLOAT, default=None, doc="The proposal's cap (None: the swarm's)."),
        "tokens": Attr(types.INT, default=None, doc="The proposal's run's tokens, for its cap (None: the swarm's)."),
        "bootstrap": Attr(types.INT, default=200, doc="Resamples for the predicted loss's interval (0: none)."),
        "seed": Attr(types.INT, default=0),
    },
    validate=_validate_fit,
    headline=lambda out: json_headline(out / FIT_FILE, _describe_fit),
    report_section=ReportSection(
        "rules.mixtures.report:fit_section", (FIT_FILE,), "Mixture law", "Mixture laws", "mixture-fits"
    ),
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=2),
    packages=("numpy", "scipy", "lightgbm", "matplotlib"),
    code_modules=_FIT_MODULES,
)


# -- mixture_pick ------------------------------------------------------------------------------


def _validate_pick(attrs: Mapping[str, JsonValue]) -> None:
    if attrs["pick"] not in PICKS:
        raise ValueError(f"pick: expected one of {', '.join(PICKS)}, got {attrs['pick']!r}")
    check_attrs("mixture_pick", attrs)


def _pick(ctx: Context) -> None:
    from rules.mixtures.fit import picked
    from rules.mixtures.table import read_json

    fitted = read_json(ctx.root(ctx.attrs["fit"]), FIT_FILE, ctx.attrs["fit"], "a pick reads a mixture_fit target")
    _write_json(ctx.out / MIXTURE_FILE, picked(fitted, ctx.attrs["pick"], ctx.attrs["tokens"]))


mixture_pick = Rule(
    name="mixture_pick",
    impl=_pick,
    doc="A mixture a fit names (its proposal, the swarm's best run, the prior, uniform) for a run of `tokens` "
    "-> mixture.json.",
    attrs={
        "fit": Attr(types.LABEL, doc="A mixture_fit target."),
        "pick": Attr(types.STRING, doc=f"One of {', '.join(PICKS)}."),
        "tokens": Attr(types.INT, doc=TOKENS_DOC),
    },
    validate=_validate_pick,
    headline=_mixture_headline,
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=1),
    code_modules=_FIT_MODULES,
)


# -- mixture_check -----------------------------------------------------------------------------


def _validate_check(attrs: Mapping[str, JsonValue]) -> None:
    roles = attrs["roles"]
    if not isinstance(roles, list) or not all(isinstance(role, list) and len(role) == 2 for role in roles):
        raise ValueError(f"roles: expected a list of [scale, role] pairs, got {roles!r}")
    _check_aligned(attrs, "roles", "validation run")


def _check(ctx: Context) -> None:
    from rules.mixtures import plots
    from rules.mixtures.check import check
    from rules.mixtures.table import read_json

    fitted = read_json(ctx.root(ctx.attrs["fit"]), FIT_FILE, ctx.attrs["fit"], "a check reads a mixture_fit target")
    found = check(
        fitted,
        [tuple(role) for role in ctx.attrs["roles"]],
        [(label, ctx.root(label)) for label in ctx.attrs["mixtures"]],
        [(label, ctx.root(label)) for label in ctx.attrs["evals"]],
    )
    _write_json(ctx.out / CHECK_FILE, found)
    plots.swarm(fitted, found, ctx.out / SWARM_PLOT)
    plots.predicted(fitted, found, ctx.out / PREDICTED_PLOT)
    plots.validation(found, ctx.out / VALIDATION_PLOT)
    ctx.log.info("%s", _describe_check(found))


def _describe_check(found: Mapping[str, Any]) -> str:
    parts = []
    for scale in found["scales"]:
        runs = scale["runs"]
        shown = ", ".join(f"{role} {run['loss']:.3f}" for role, run in runs.items())
        verdict = "holds" if scale.get("holds") else "does not hold"
        parts.append(f"{scale['scale']}: {shown}; the proposal's advantage {verdict}")
    return "; ".join(parts) + f" ({CHECK_FILE})"


mixture_check = Rule(
    name="mixture_check",
    impl=_check,
    doc="The proposal trained beside the references at each scale, against the fit's predictions -> "
    "validation.json and the mixture page's plots.",
    attrs={
        "fit": Attr(types.LABEL, doc="A mixture_fit target."),
        "roles": Attr(types.JSON, doc="[scale, role] of each run: role proposal, uniform, prior or best_run."),
        **_trained_runs("mixture_pick target"),
    },
    validate=_validate_check,
    headline=lambda out: json_headline(out / CHECK_FILE, _describe_check),
    report_section=ReportSection(
        "rules.mixtures.report:check_section", (CHECK_FILE,), "Mixture", "Mixtures", "mixtures"
    ),
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=2),
    packages=("matplotlib",),
    code_modules=(*_STEPS, "rules.mixtures.plots"),
)
