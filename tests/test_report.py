"""marinbuild report: the HTML page of an experiment, opened in a real browser.

The browser test builds the tiny LM pipeline of test_rules_lm (two runs that differ in
their learning rate), a step that fails and one that depends on it, and a step writing a
scaling-law fit (fit.json in the schema of fit_scaling_law, and a PNG plot); then it opens
the report in headless Chromium (Debian's chromium and chromium-driver, driven by
selenium) and checks what a reader sees. A screenshot is saved under the test's tmp_path.
The status test needs no browser: it reads the report's steps table.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen
from xml.etree import ElementTree

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from marinbuild.report import StepStatus, diagram
from conftest import CLI_TIMEOUT_S, build_json, cli_env, run_cli, statuses, write_files
from test_rules_lm import PKG, TRAIN_TIMEOUT_S, _build_file, _output, _workspace

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # apt: chromium chromium-driver

EXTRA_TARGETS = """
train_lm(
    name = "model_slow",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {"learning_rate": 1e-4},
    trainer = {"steps": 6, "batch_size": 4, "eval_interval": 3, "checkpoint_interval": 2, "max_eval_batches": 2},
)
genrule(name = "broken", outs = ["x.txt"], cmd = "echo loading shards; echo 'CUDA out of memory (on purpose)' >&2; exit 3")
genrule(name = "after_broken", srcs = [":broken"], outs = ["y.txt"], cmd = "cat $< > $@")
py_step(name = "fit", fn = "fit.py:write_fit")
"""

# A scaling-law step: fit_scaling_law's fit and plots (rules/scaling_fit.py, scaling_plots.py)
# over synthetic isoFLOP runs drawn from known laws, so that no sweep has to be trained.
FIT_STEP = """
import json
import math

from rules import scaling_fit, scaling_plots


def write_fit(ctx):
    def run(budget, offset):
        optimum = math.log10(0.08 * budget**0.55)
        loss = 1.8 + 40 * budget**-0.12 + 0.35 * offset**2
        return scaling_fit.Run(f"//s:{budget:.0e}{offset:+}", budget, 10 ** (optimum + offset), budget, loss)

    runs = [run(budget, offset) for budget in (1e16, 1e17, 1e18) for offset in (-0.5, -0.2, 0.1, 0.4)]
    fit = scaling_fit.fit(runs, [run(1e19, 0.05)], [1e21], scaling_fit.Settings(bootstrap=50))
    (ctx.out / "fit.json").write_text(json.dumps(fit))
    scaling_plots.isoflops(fit, ctx.out / "isoflops.png")
    scaling_plots.scaling(fit, ctx.out / "scaling.png")
"""

STEP_ROW = re.compile(r'<tr><td><a href="steps/[^"]+">(//[^<]+)</a></td><td>[^<]*</td><td data-sort="([^"]+)">')


def _report(ws: Path, out: Path, *patterns: str) -> Path:
    rc, stdout, stderr = run_cli(ws, "report", *patterns, "-o", str(out))
    assert rc == 0, stderr
    index = Path(stdout.strip())
    assert index == (out / "index.html").resolve() and index.is_file()
    return index


def _browser() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1300,1000"):
        options.add_argument(argument)
    # No network: a report must render from its own files.
    options.add_argument("--proxy-server=127.0.0.1:9")
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def _visible(browser: WebDriver, selector: str):
    found = browser.find_element(By.CSS_SELECTOR, selector)
    browser.execute_script("arguments[0].scrollIntoView()", found)
    assert found.is_displayed() and found.size["width"] > 0 and found.size["height"] > 0, selector
    return found


def test_report_in_a_browser(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", _build_file() + EXTRA_TARGETS)
    write_files(ws, {"exp/fit.py": FIT_STEP})
    rc, stdout, stderr = run_cli(ws, "build", "--json", "--keep-going", f"{PKG}:all", timeout=2 * TRAIN_TIMEOUT_S)
    assert rc == 1, stderr
    built = json.loads(stdout)
    assert statuses(built)[f"{PKG}:broken"] == "failed" and statuses(built)[f"{PKG}:after_broken"] == "skipped"
    assert statuses(built)[f"{PKG}:model"] == "built" and statuses(built)[f"{PKG}:model_slow"] == "built"
    index = _report(ws, tmp_path / "report", f"{PKG}:all")
    html = index.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", html), "the report must not load anything from the network"

    browser = _browser()
    try:
        browser.get(index.as_uri())
        browser.set_window_size(1300, browser.execute_script("return document.body.scrollHeight") + 100)

        # The graph: a box per target, each a link to its step page.
        graph = _visible(browser, "#graph svg.graph")
        links = graph.find_elements(By.CSS_SELECTOR, "a")
        assert len(links) == len(built["targets"]) == 9

        # The runs table, sortable: the fast run has the lower final eval loss.
        table = _visible(browser, "#runs-table")
        headers = [cell.text for cell in table.find_elements(By.CSS_SELECTOR, "th")]
        assert {"optimizer.learning_rate", "eval_loss", "eval.loss"} <= set(headers), headers
        assert "model.hidden_dim = 32" in _visible(browser, "#shared-hyperparameters").text

        def runs_column(name: str) -> list[str]:
            column = headers.index(name) + 1
            return [cell.text for cell in table.find_elements(By.CSS_SELECTOR, f"tbody td:nth-child({column})")]

        assert set(runs_column("run")) == {f"{PKG}:model", f"{PKG}:model_slow"}
        table.find_elements(By.CSS_SELECTOR, "th")[headers.index("optimizer.learning_rate")].click()
        assert runs_column("run") == [f"{PKG}:model_slow", f"{PKG}:model"]
        assert runs_column("optimizer.learning_rate") == ["0.0001", "0.003"]
        table.find_elements(By.CSS_SELECTOR, "th")[headers.index("eval_loss")].click()
        assert runs_column("run") == [f"{PKG}:model", f"{PKG}:model_slow"]

        # Loss curves: both runs, train and eval, drawn.
        curves = _visible(browser, "#loss-curves svg")
        legend = curves.text
        for run in ("model", "model_slow"):
            assert f":{run} train/loss" in legend and f":{run} eval/loss" in legend, legend
        assert len(curves.find_elements(By.CSS_SELECTOR, "path")) > 10

        # The scaling-law fit: its two plots, and the forecast table with the target budget.
        fit = json.loads((_output(built, f"{PKG}:fit") / "fit.json").read_text())
        _visible(browser, "#scaling")
        plots = browser.find_elements(By.CSS_SELECTOR, "#scaling img.plot")
        assert [plot.get_attribute("alt") for plot in plots] == ["isoflops.png", "scaling.png"]
        for plot in plots:
            browser.execute_script("arguments[0].scrollIntoView()", plot)
            assert plot.is_displayed() and browser.execute_script("return arguments[0].naturalWidth", plot) > 100
        forecasts = _visible(browser, "#forecast-table").text
        assert "1e+21" in forecasts and f"{fit['forecasts'][-1]['loss']:.4g}" in forecasts, forecasts
        assert "//s:1e+19+0.05" in _visible(browser, "#held-out-table").text

        # The failure: which step, the error, its log tail, and the dependents skipped.
        failures = _visible(browser, "#failures")
        assert f"{PKG}:broken failed" in failures.text and "command exited with status 3" in failures.text
        assert "CUDA out of memory (on purpose)" in _visible(browser, "#failures pre.log").text
        assert f"{PKG}:after_broken: dependency {PKG}:broken failed" in _visible(browser, "#failures ul.skipped").text
        browser.execute_script("window.scrollTo(0, 0)")
        screenshot = tmp_path / "report.png"
        browser.save_screenshot(str(screenshot))
        print(f"report screenshot: {screenshot}")

        # The failed step's page, reached from its box in the graph: the attempt and its log.
        broken = next(link for link in links if "exp_broken-" in (link.get_dom_attribute("href") or link.get_dom_attribute("xlink:href")))
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


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is optional; without it the layered layout is used")
def test_graph_layout_with_graphviz(monkeypatch) -> None:
    svg = _diagram(monkeypatch, with_dot=True)
    assert sorted(_links(svg)) == ["steps/a.html", "steps/b.html", "steps/c.html"]
    assert diagram.COLOURS[StepStatus.FAILED][0] in ElementTree.tostring(svg, encoding="unicode")


def test_serve_regenerates_the_report_while_builds_run(make_workspace) -> None:
    ws = make_workspace(_files("echo g1 > $@"))
    command = [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "serve", "//pkg:good2", "--port", "0", "--refresh", "1"]
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
