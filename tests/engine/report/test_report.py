"""marinbuild report: the HTML page of an experiment, opened in a real browser.

The browser test builds the tiny LM pipeline of test_rules_lm, a step that fails and one
that depends on it, and a tiny scaling suite: an isoFLOP sweep trained on the same token
cache (three widths at two budgets), a held-out run, and fit_scaling_law over them. Then
it opens the report in headless Chromium (Debian's chromium and chromium-driver, driven
by selenium) and checks what a reader sees: the graph, the runs table and loss curves of
every run, the fit's plots and numbers as fit.json has them, and the failure with its log.
A screenshot is saved as a test artifact, test-artifacts/report.png in the checkout. The
status test needs no browser: it reads the report's steps table.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from pathlib import Path
from urllib.request import urlopen
from xml.etree import ElementTree

from conftest import CLI_TIMEOUT_S, build_json, cli_command, cli_env, require_tool, run_cli, statuses, write_files
from helpers_lm import PKG, TRAIN_TIMEOUT_S, lm_build_file, sweep_workspace, target_output
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from marinbuild.report import StepStatus, diagram, plots

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"  # git-ignored; CI keeps what is there

EXTRA_TARGETS = """
genrule(name = "broken", outs = ["x.txt"], \
cmd = "echo loading shards; echo 'CUDA out of memory (on purpose)' >&2; exit 3")
genrule(name = "after_broken", srcs = [":broken"], outs = ["y.txt"], cmd = "cat $< > $@")
"""

# A scaling suite small enough for CI, on the pipeline's tokens: one-layer models 4, 16 and
# 64 wide (depth_base makes every depth round to the minimum), a few dozen steps each. At
# these sizes the widest model, given the fewest tokens, is far from trained, so each
# budget's parabola is clearly convex (its middle run lies about 0.14 nats below the chord
# of the other two); at 1e9 its minimum is inside the sweep, at 3e9 it is extrapolated.
SCALING_SUITE = """
load("//rules/scaling:scaling.star", "isoflop_sweep", "optimal_runs", "scaling_recipe")
recipe = scaling_recipe(
    vocab_size = 300, seq_len = 64, widths = [4, 16, 64], head_dim = 4,
    depth_base = 1000, depth_log_slope = 0, depth_offset = 0,
    target_steps = 30, min_batch = 4, max_batch = 16, max_learning_rate = 0.03, max_eval_batches = 2,
)

def one_core(budget):
    return cpu(cores = 1, memory_gb = 2)

runs = isoflop_sweep(name = "iso", budgets = [1e9, 3e9], candidates_per_budget = 3, data = ":tokens", \
recipe = recipe, resources = one_core, evaluate = False)
held_out = optimal_runs(name = "heldout", budgets = [6e9], widths = {6e9: 16}, data = ":tokens", \
recipe = recipe, resources = one_core, evaluate = False)
fit_scaling_law(name = "fit", runs = runs, held_out = held_out, target_budgets = [1e11], bootstrap = 100)
"""
SWEEP = [f"{PKG}:iso-{budget}-{width}-L1" for budget in ("1e9", "3e9") for width in ("d4", "d16", "d64")]
HELD_OUT = f"{PKG}:heldout-6e9-d16-L1"

STEP_ROW = re.compile(r'<tr><td><a href="steps/[^"]+">(//[^<]+)</a></td><td>[^<]*</td><td data-sort="([^"]+)">')


def _report(ws: Path, out: Path, *patterns: str) -> Path:
    rc, stdout, stderr = run_cli(ws, "report", *patterns, "-o", str(out))
    assert rc == 0, stderr
    index = Path(stdout.strip())
    assert index == (out / "index.html").resolve() and index.is_file()
    return index


def _browser(chromium: str, chromedriver: str) -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1300,1000",
    ):
        options.add_argument(argument)
    # No network: a report must render from its own files.
    options.add_argument("--proxy-server=127.0.0.1:9")
    return webdriver.Chrome(options=options, service=Service(chromedriver))


def _visible(browser: WebDriver, selector: str):
    found = browser.find_element(By.CSS_SELECTOR, selector)
    browser.execute_script("arguments[0].scrollIntoView()", found)
    assert found.is_displayed() and found.size["width"] > 0 and found.size["height"] > 0, selector
    return found


def test_report_in_a_browser(tmp_path: Path) -> None:
    # Looked for first: without them the test skips before its two minutes of training.
    chromium = require_tool("chromium", "the report is checked in headless Chromium (apt: chromium)")
    chromedriver = require_tool("chromedriver", "selenium drives Chromium through it (apt: chromium-driver)")
    ws = sweep_workspace(tmp_path / "ws", lm_build_file() + EXTRA_TARGETS + SCALING_SUITE)
    rc, stdout, stderr = run_cli(ws, "build", "--json", "--keep-going", f"{PKG}:all", timeout=2 * TRAIN_TIMEOUT_S)
    assert rc == 1, stderr
    built = json.loads(stdout)
    assert statuses(built)[f"{PKG}:broken"] == "failed" and statuses(built)[f"{PKG}:after_broken"] == "skipped"
    runs = [f"{PKG}:model", *SWEEP, HELD_OUT]
    assert {statuses(built)[label] for label in (*runs, f"{PKG}:fit")} == {"built"}, stderr
    summaries = {label: json.loads((target_output(built, label) / "summary.json").read_text()) for label in runs}
    fit_output = target_output(built, f"{PKG}:fit")
    fit = json.loads((fit_output / "fit.json").read_text())
    index = _report(ws, tmp_path / "report", f"{PKG}:all")
    html = index.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", html), "the report must not load anything from the network"

    browser = _browser(chromium, chromedriver)
    try:
        browser.get(index.as_uri())
        browser.set_window_size(1300, browser.execute_script("return document.body.scrollHeight") + 100)

        # The graph: a box per target, each a link to its step page.
        graph = _visible(browser, "#graph svg.graph")
        links = graph.find_elements(By.CSS_SELECTOR, "a")
        assert len(links) == len(built["targets"]) == 15

        # The runs table: the pipeline's run and the suite's, sortable.
        table = _visible(browser, "#runs-table")
        headers = [cell.text for cell in table.find_elements(By.CSS_SELECTOR, "th")]
        assert {"optimizer.learning_rate", "model.hidden_dim", "trainer.steps", "eval_loss", "eval.tokens.loss"} <= set(
            headers
        ), headers
        assert "model.num_layers = 1" in _visible(browser, "#shared-hyperparameters").text

        def runs_column(name: str) -> list[str]:
            column = headers.index(name) + 1
            return [cell.text for cell in table.find_elements(By.CSS_SELECTOR, f"tbody td:nth-child({column})")]

        assert sorted(runs_column("run")) == sorted(runs)
        table.find_elements(By.CSS_SELECTOR, "th")[headers.index("optimizer.learning_rate")].click()
        assert runs_column("run")[0] == f"{PKG}:model" and runs_column("optimizer.learning_rate")[0] == "0.003"
        table.find_elements(By.CSS_SELECTOR, "th")[headers.index("eval_loss")].click()
        assert runs_column("run") == sorted(runs, key=lambda label: summaries[label]["eval_loss"])
        assert runs_column("eval_loss") == [f"{summaries[label]['eval_loss']:.4g}" for label in runs_column("run")]

        # Loss curves: every run's training loss, and the evaluations of the pipeline's run.
        curves = _visible(browser, "#loss-curves svg")
        legend = curves.text
        # Eight runs: a key of runs (a colour each) and one of curves (a line style each).
        assert {f":{run.split(':')[1]}" for run in runs} | {"train/loss", "eval/loss"} <= set(legend.splitlines()), (
            legend
        )
        assert len(curves.find_elements(By.CSS_SELECTOR, "path")) > 10

        # The scaling-law fit of the suite: the fit step's own plots, its forecasts (the
        # target budget and the held-out run's), its laws and the held-out check.
        assert {budget["budget"] for budget in fit["budgets"] if budget["used"]} == {1e9, 3e9}
        scaling = _visible(browser, "#scaling")
        plots = browser.find_elements(By.CSS_SELECTOR, "#scaling img.plot")
        assert [plot.get_attribute("alt") for plot in plots] == ["isoflops.png", "scaling.png"]
        for plot in plots:
            browser.execute_script("arguments[0].scrollIntoView()", plot)
            assert plot.is_displayed() and browser.execute_script("return arguments[0].naturalWidth", plot) > 100
            shown = base64.b64decode(plot.get_attribute("src").split(",", 1)[1])
            assert shown == (fit_output / plot.get_attribute("alt")).read_bytes()
        forecasts = _visible(browser, "#forecast-table").text
        assert [forecast["budget"] for forecast in fit["forecasts"]] == [6e9, 1e11]
        for forecast in fit["forecasts"]:
            row = f"{forecast['budget']:.4g} {forecast['optimal_tokens']:.4g} [{forecast['optimal_tokens_ci'][0]:.4g}, "
            assert row in forecasts and f"{forecast['loss']:.4g} [{forecast['loss_ci'][0]:.4g}, " in forecasts, (
                forecasts
            )
        assert f"α = {fit['tokens_law']['alpha']:.4g} [" in scaling.text
        (checked,) = fit["held_out"]
        held_out = _visible(browser, "#held-out-table").text
        assert checked["label"] == HELD_OUT and checked["loss"] == summaries[HELD_OUT]["eval_loss"]
        assert (
            f"{HELD_OUT} 6e+09 {checked['loss']:.4g} {checked['forecast_loss']:.4g} {checked['relative_error']:.4g}"
            in held_out
        ), held_out

        # The failure: which step, the error, its log tail, and the dependents skipped.
        failures = _visible(browser, "#failures")
        assert f"{PKG}:broken failed" in failures.text and "command exited with status 3" in failures.text
        assert "CUDA out of memory (on purpose)" in _visible(browser, "#failures pre.log").text
        assert f"{PKG}:after_broken: dependency {PKG}:broken failed" in _visible(browser, "#failures ul.skipped").text
        browser.execute_script("window.scrollTo(0, 0)")
        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "report.png"
        assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000
        print(f"report screenshot: {screenshot}")

        # The failed step's page, reached from its box in the graph: the attempt and its log.
        broken = next(
            link
            for link in links
            if "exp_broken-" in (link.get_dom_attribute("href") or link.get_dom_attribute("xlink:href"))
        )
        browser.execute_script("arguments[0].scrollIntoView()", broken)
        broken.click()
        assert browser.find_element(By.TAG_NAME, "h1").text == f"{PKG}:broken"
        attempt = _visible(browser, "details.attempt-failed")
        assert "CUDA out of memory (on purpose)" in attempt.find_element(By.CSS_SELECTOR, "pre.log").text
        assert "exit status\n3" in attempt.text or "exit status 3" in attempt.text
    finally:
        browser.quit()


GENRULES = {
    "pkg/BUILD.marin": """\
    genrule(name = "bad", outs = ["bad.txt"], cmd = "echo boom >&2; exit 3")
    genrule(name = "after_bad", srcs = [":bad"], outs = ["after.txt"], cmd = "cat $< > $@")
    genrule(name = "good1", outs = ["g1.txt"], cmd = {good1!r})
    genrule(name = "good2", srcs = [":good1"], outs = ["g2.txt"], cmd = "cat $< > $@")
    """
}


def _statuses(page: Path | str) -> dict[str, str]:
    """The status of each step in a report's steps table."""
    return dict(STEP_ROW.findall(page.read_text() if isinstance(page, Path) else page))


def _files(good1: str) -> dict[str, str]:
    return {path: text.format(good1=good1) for path, text in GENRULES.items()}


def test_report_statuses_agree_with_query(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_files("echo g1 > $@"))
    out = tmp_path / "report"
    assert set(_statuses(_report(ws, out, "//pkg:all")).values()) == {"never built"}

    build_json(ws, "--keep-going", "//pkg:all", expect_rc=1)
    assert _statuses(_report(ws, out, "//pkg:all")) == {
        "//pkg:bad": "failed",
        "//pkg:after_bad": "never built",
        "//pkg:good1": "cached",
        "//pkg:good2": "cached",
    }

    # An edit: good1 reruns; good2 waits for it. Both were built before: stale.
    write_files(ws, _files("echo changed > $@"))
    found = _statuses(_report(ws, out, "//pkg:all"))
    assert found["//pkg:good1"] == found["//pkg:good2"] == "stale"
    # query's stale() is "a build would run it", which a failed step is too.
    for function, shown_as in (("stale", {"stale", "failed"}), ("failed", {"failed"}), ("cached", {"cached"})):
        rc, stdout, _err = run_cli(ws, "query", f"{function}(//pkg:good1 + //pkg:bad)")
        assert rc == 0
        assert set(stdout.split()) == {label for label in ("//pkg:good1", "//pkg:bad") if found[label] in shown_as}

    # Only the selected targets (and their dependencies) get pages.
    _report(ws, out, "//pkg:good2")
    assert sorted(page.name.rsplit("-", 1)[0] for page in (out / "steps").glob("*.html")) == ["pkg_good1", "pkg_good2"]


def test_report_of_an_unknown_target_is_bad_input(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace(_files("echo g1 > $@"))
    rc, _out, err = run_cli(ws, "report", "//pkg:nope", "-o", str(tmp_path / "report"))
    assert rc == 2 and "no target 'nope'" in err
    assert not (tmp_path / "report").exists()


def _diagram(monkeypatch, with_dot: bool) -> ElementTree.Element:
    if not with_dot:
        monkeypatch.setenv("PATH", "")  # no dot on it: the layered layout
    nodes = [
        diagram.Node("//p:a", "a", "genrule", StepStatus.CACHED, "steps/a.html"),
        diagram.Node("//p:b", "b", "genrule", StepStatus.FAILED, "steps/b.html"),
        diagram.Node("//p:c", "c", "py_step", StepStatus.NEVER_BUILT, "steps/c.html"),
    ]
    return ElementTree.fromstring(diagram.render(nodes, {"//p:c": ["//p:a", "//p:b"]}))


SVG = "{http://www.w3.org/2000/svg}"


def _links(svg: ElementTree.Element) -> list[str]:
    return [link.get("href") or link.get("{http://www.w3.org/1999/xlink}href") for link in svg.iter(f"{SVG}a")]


def test_graph_layout_without_graphviz(monkeypatch) -> None:
    svg = _diagram(monkeypatch, with_dot=False)
    assert _links(svg) == ["steps/a.html", "steps/b.html", "steps/c.html"]
    boxes = {group.get("data-label"): group.find(f"{SVG}rect") for group in svg.iter(f"{SVG}g")}
    x = {label: float(rect.get("x")) for label, rect in boxes.items()}
    assert x["//p:a"] == x["//p:b"] < x["//p:c"]  # dependencies in the column before
    assert boxes["//p:b"].get("fill") == diagram.COLOURS[StepStatus.FAILED][0]
    assert len([path for path in svg.iter(f"{SVG}path") if path.get("class") == "edge"]) == 2


def test_graph_layout_with_graphviz(monkeypatch) -> None:
    require_tool("dot", "the graph is laid out by Graphviz where it is installed (apt: graphviz)")
    svg = _diagram(monkeypatch, with_dot=True)
    assert sorted(_links(svg)) == ["steps/a.html", "steps/b.html", "steps/c.html"]
    assert diagram.COLOURS[StepStatus.FAILED][0] in ElementTree.tostring(svg, encoding="unicode")


def test_serve_regenerates_the_report_while_builds_run(make_workspace) -> None:
    ws = make_workspace(_files("echo g1 > $@"))
    command = cli_command(ws, "serve", "//pkg:good2", "--port", "0", "--refresh", "1")
    server = subprocess.Popen(command, cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), server.stderr.read() if server.poll() is not None else url
        page = urlopen(url, timeout=CLI_TIMEOUT_S).read().decode()
        assert _statuses(page) == {"//pkg:good1": "never built", "//pkg:good2": "never built"}
        assert '<meta http-equiv="refresh" content="1">' in page

        build_json(ws, "//pkg:good2")
        time.sleep(1.1)  # the refresh interval: the next request regenerates
        assert set(_statuses(urlopen(url + "index.html", timeout=CLI_TIMEOUT_S).read().decode()).values()) == {"cached"}
    finally:
        server.terminate()
        server.wait(timeout=CLI_TIMEOUT_S)


def test_a_cached_step_shows_its_own_keys_attempt_not_another_keys_failure(make_workspace, tmp_path: Path) -> None:
    """A step built, then edited into failing, then edited back: its output is cached again,
    and the steps table says the attempt at that key succeeded; the failure at the other key
    is not this output's. Before, the table said "failed" beside "cached"."""
    ws = make_workspace(_files("echo g1 > $@"))
    build_json(ws, "//pkg:good2")
    write_files(ws, _files("echo broken >&2; exit 4"))
    build_json(ws, "//pkg:good2", expect_rc=1)
    write_files(ws, _files("echo g1 > $@"))
    out = tmp_path / "report"
    index = _report(ws, out, "//pkg:good2")
    assert _statuses(index)["//pkg:good1"] == "cached"
    row = next(
        line for line in index.read_text().splitlines() if ">//pkg:good1</a>" in line and "steps-table" not in line
    )
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[4:6] == ["2", "succeeded"], cells  # two attempts; the newest at its key succeeded
    page = next((out / "steps").glob("pkg_good1-*.html")).read_text()
    assert re.search(r"<th>last build</th><td>failed, at another key \([0-9a-f]{12}\)", page), page


def test_a_sweeps_loss_curves_keep_their_legend_inside_the_figure(tmp_path: Path) -> None:
    """8 runs of 4 curves each (training, evaluation, two evaluation sets), as a data ablation
    at four thresholds and two seeds draws them: every entry of the legend lies inside the
    figure as Chromium lays it out. Before, a legend of 32 entries in three columns ran off
    both sides."""
    chromium = require_tool("chromium", "the figure is laid out by headless Chromium (apt: chromium)")
    chromedriver = require_tool("chromedriver", "selenium drives Chromium through it (apt: chromium-driver)")
    metrics = ("train/loss", "eval/loss", "eval/docs_tokens/loss", "eval/library_tokens/loss")
    runs = [f":model_threshold_{threshold}_seed_{seed}" for threshold in (0.5, 0.7, 0.8, 0.9) for seed in (0, 1)]
    curves = [
        plots.Curve(run, metric, [0, 30, 60], [6.0, 5.0 + index / 10, 4.0 + index / 10])
        for index, run in enumerate(runs)
        for metric in metrics
    ]
    page = tmp_path / "curves.html"
    page.write_text(f"<!DOCTYPE html><html><body>{plots.curves_svg(curves, 'Loss')}</body></html>")
    browser = _browser(chromium, chromedriver)
    try:
        browser.get(page.as_uri())
        texts = browser.execute_script(
            """const figure = document.querySelector("svg").getBoundingClientRect();
            return [...document.querySelectorAll("svg text")].map(text => {
              const box = text.getBoundingClientRect();
              return [text.textContent, box.left >= figure.left && box.right <= figure.right
                                        && box.top >= figure.top && box.bottom <= figure.bottom];
            });"""
        )
    finally:
        browser.quit()
    assert [text for text, inside in texts if not inside] == []
    shown = {text for text, _inside in texts}
    assert set(runs) | set(metrics) <= shown, shown  # a key of runs (colours) and one of curves (line styles)
