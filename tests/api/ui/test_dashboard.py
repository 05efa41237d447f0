"""The dashboard at /ui in a real browser (headless Debian Chromium driven by Selenium) against a real
`raysampler serve`: sign-in, a run submitted from the form appears in the list, its trace plot gains points while
it samples (read from the plotted data), the summary shows every parameter, cancel, a refused key, tenant
isolation, and an invalid form value shown at its field. All of it under the service's Content-Security-Policy:
a violation the browser reports in its console fails the test it happened in."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest
from support.service_helpers import SERVICE_KEYS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
T = TypeVar("T")
#: the tests' own requests to the service (httpx's default 5 s is too short while the machine is loaded)
HTTP_TIMEOUT_S = 60.0
ALICE, BOB = SERVICE_KEYS["alice"], SERVICE_KEYS["bob"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.fail(
            "the dashboard tests need Debian's chromium and chromium-driver: apt-get install -y chromium "
            "chromium-driver (the README's test command installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={tempfile.mkdtemp()}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, where CSP violations are reported
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def console(driver: Any) -> list[str]:
    """The browser console's messages since the last call (reading the log empties it)."""
    return [entry["message"] for entry in driver.get_log("browser")]


def csp_violations(messages: list[str]) -> list[str]:
    return [m for m in messages if "content security policy" in m.lower()]


@pytest.fixture(autouse=True)
def no_csp_violations(browser: Any) -> Iterator[None]:
    """Fails the test if the browser reported a Content-Security-Policy violation while it ran."""
    console(browser)
    yield
    assert csp_violations(console(browser)) == []


def wait_for(fn: Callable[[], T], timeout: float = 300.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            out = fn()
            if out:
                return out
        except Exception as exc:  # the page may be re-rendering between polls
            last_error = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def sign_in(driver: Any, url: str, key: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/ui/#/signin")
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    box = wait_for(lambda: driver.find_element(By.ID, "key"), what="the sign-in form")
    box.clear()
    box.send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#signin-form button").click()


def fill_form(browser: Any, fields: Sequence[tuple[str, str]], rounds: int | None = None) -> None:
    """Type each (element id, value) into the submit form, replacing what is there; with `rounds`, a fixed number of
    rounds instead of "until converged"."""
    from selenium.webdriver.common.by import By

    for field, value in fields:
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    if rounds is not None:
        browser.find_element(By.ID, "f-auto").click()
        box = browser.find_element(By.ID, "f-rounds")
        box.clear()
        box.send_keys(str(rounds))


def run_ids_listed(driver: Any) -> set[str]:
    return set(driver.execute_script("return [...document.querySelectorAll('#runs-body tr')].map(r => r.dataset.run)"))


def test_a_wrong_key_is_refused(browser, service):
    from selenium.webdriver.common.by import By

    sign_in(browser, service.url, "not-a-valid-key-000")
    msg = wait_for(lambda: browser.find_element(By.ID, "signin-error").text, what="the refusal")
    assert "refused" in msg
    assert browser.execute_script("return sessionStorage.getItem('raysampler.apiKey')") is None


def test_submit_watch_the_trace_grow_follow_its_requests_and_events_and_cancel(browser, service):
    """A run submitted from the form, followed on its page while it samples: the trace grows, the summary names every
    parameter, one request per resource at a time and the event stream open, the event log, keyboard focus kept, the
    worker timeline and the operator view; listed for its tenant, cancelled from its page, unseen by another tenant.
    (One running run for all of it: each run on the service's Ray starts worker processes of its own.)"""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "f-dataset")).options) > 1, what="the data sets")
    Select(browser.find_element(By.ID, "f-dataset")).select_by_value("builtin:breast_cancer")
    for field, value in (("f-chains", "2"), ("f-shards-n", "2"), ("f-burn", "20")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "f-auto").click()  # a fixed number of rounds: long enough to watch it sample
    rounds = browser.find_element(By.ID, "f-rounds")
    rounds.clear()
    rounds.send_keys("400000")
    assert '"num_rounds": 400000' in browser.find_element(By.ID, "spec-json").get_attribute("value")
    browser.find_element(By.ID, "submit").click()
    run_id = wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )
    rid = run_id

    # the trace plot's data grow while the run samples
    def plotted_last_index() -> int:
        return browser.execute_script(
            "const p = window.rsDashboard.plotted(); const s = window.rsDashboard.state;"
            "return p.length === 2 && p[0] > 0 ? s.trace.index[s.trace.index.length - 1] : 0"
        )

    first = wait_for(plotted_last_index, 300, "the first plotted draws")
    later = wait_for(lambda: (v := plotted_last_index()) > first and v, 300, "more plotted draws")
    assert later > first
    assert browser.find_element(By.ID, "run-status").text == "RUNNING"

    # the summary table has a row for every parameter, named as the run names them
    names = browser.execute_script("return window.rsDashboard.state.info.param_names")
    assert len(names) == 31 and names[0] == "beta[(Intercept)]"
    rows = wait_for(
        lambda: browser.execute_script(
            "return [...document.querySelectorAll('#summary tr[data-param]')].map(r => r.dataset.param)"
        ),
        60,
        "the summary",
    )
    assert rows == names

    # one request per resource at a time, while the trace follows the stored draws
    counted = f"GET /v1/runs/{rid}/trace"

    def traces() -> int:
        return browser.execute_script(f"return window.rsDashboard.net.count['{counted}'] || 0")

    seen = wait_for(traces, 300, "the first trace")
    wait_for(lambda: traces() > seen + 2, 300, "the trace to follow the stored draws")
    net = browser.execute_script("return window.rsDashboard.net")
    assert max(net["maxInflight"].values()) == 1, net["maxInflight"]
    assert net["inflight"][f"GET /v1/runs/{rid}/events"] == 1  # the event stream is open
    # event log: one readable line per event, at local time, no raw JSON
    lines = wait_for(
        lambda: [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#events li")], 60, "the event log"
    )
    assert any(line.endswith("status RUNNING") for line in lines)
    for line in lines:
        assert re.match(r"^\d{1,2}:\d{2}:\d{2}( [AP]M)? \w", line) and "{" not in line, line
    # keyboard focus stays on the parameter list while the page refreshes
    browser.execute_script("document.getElementById('param').focus()")
    refreshed = traces()
    wait_for(lambda: traces() >= refreshed + 2, 60, "two refreshes of the trace")
    assert browser.execute_script("return document.activeElement.id") == "param"
    # the worker timeline marks the run's status changes at their times
    marks = browser.execute_script("return window.rsDashboard.state.marks.map(m => m.label)")
    assert marks[:2] == ["PENDING", "RUNNING"]
    assert plotted_axes(browser)["workers"] == ["time (local)", "τ_i (ms per local step)"]
    # the operator view: the node (CPUs) with this run's workers on it
    open_page(browser, service.url, "#/operator")
    row = wait_for(
        lambda: [r for r in browser.find_elements(By.CSS_SELECTOR, "#op-nodes tr[data-node]") if rid in r.text],
        60,
        "the run's workers on a node",
    )[0]
    assert row.find_elements(By.TAG_NAME, "td")[3].text == "2"  # the test service's Ray has 2 CPUs
    assert browser.find_element(By.ID, "ray-dashboard-none").is_displayed()

    # the run is listed for its tenant
    browser.get(f"{service.url}/ui/#/runs")
    wait_for(lambda: run_id in run_ids_listed(browser), 300, "the run in the list")

    # cancel from its page
    browser.get(f"{service.url}/ui/#/run/{run_id}")
    cancel = wait_for(lambda: (b := browser.find_element(By.ID, "cancel")).is_enabled() and b, what="cancel")
    cancel.click()
    wait_for(lambda: browser.find_element(By.ID, "run-status").text == "CANCELLED", 300, "CANCELLED")
    assert browser.find_element(By.ID, "run-stop").text == "Stopped: cancelled."
    stream = f"GET /v1/runs/{rid}/events"
    wait_for(lambda: browser.execute_script(f"return window.rsDashboard.net.inflight['{stream}']") == 0, 30, "the end")

    # another tenant never sees it
    sign_in(browser, service.url, BOB)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="bob's runs page")
    time.sleep(1.0)  # a poll has filled the table
    assert run_id not in run_ids_listed(browser)
    browser.get(f"{service.url}/ui/#/run/{run_id}")
    msg = wait_for(lambda: browser.find_element(By.ID, "run-error").text, what="the not-found message")
    assert f"No run {run_id}" in msg


def test_an_invalid_form_value_shows_the_api_error_at_its_field(browser, service):
    from selenium.webdriver.common.by import By

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: '"family"' in browser.find_element(By.ID, "spec-json").get_attribute("value"), 60, "the form")
    chains = browser.find_element(By.ID, "f-chains")
    chains.clear()
    chains.send_keys("0")
    browser.find_element(By.ID, "submit").click()
    note = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, '.field[data-loc="chains"] .field-error'),
        what="the error at the chains field",
    )
    assert "chains" in note.text and "greater than" in note.text
    assert "#/submit" in browser.current_url  # nothing was submitted
    chains.clear()  # chains "auto" again, at most 0: the error sits at the max_chains field
    cap = browser.find_element(By.ID, "f-max-chains")
    cap.send_keys("0")
    assert '"max_chains": 0' in browser.find_element(By.ID, "spec-json").get_attribute("value")
    browser.find_element(By.ID, "submit").click()
    note = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, '.field[data-loc="max_chains"] .field-error'),
        what="the error at the max_chains field",
    )
    assert "max_chains" in note.text and "greater than" in note.text


def test_the_dashboard_is_served_under_the_strict_policy(service):
    import httpx

    from raysampler.api.security import STRICT_CSP

    ui = pathlib.Path(__file__).resolve().parents[3] / "api" / "ui"
    scripts = sorted(p.relative_to(ui).as_posix() for p in ui.rglob("*.js"))
    assert {"app.js", "js/api.js", "js/plots.js", "vendor/uPlot.iife.min.js"} <= set(scripts), scripts
    for path in ("/ui/", "/ui/app.css", *(f"/ui/{s}" for s in scripts)):
        r = httpx.get(service.url + path, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200 and r.headers["Content-Security-Policy"] == STRICT_CSP, path
        assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["Referrer-Policy"] == "no-referrer"
        if path.endswith(".js"):  # a module script runs only when served as JavaScript
            assert r.headers["Content-Type"].split(";")[0] == "text/javascript", (path, r.headers["Content-Type"])
    assert "frame-ancestors 'none'" in STRICT_CSP and "unsafe-inline" not in STRICT_CSP


def test_the_policy_is_enforced_and_a_violation_is_seen(browser, service):
    """An inline script injected into the dashboard does not run, and the console reports it: the check every other
    test relies on (fixture no_csp_violations) sees violations."""
    from selenium.webdriver.common.by import By

    browser.get(f"{service.url}/ui/#/signin")
    wait_for(lambda: browser.find_element(By.ID, "key"), what="the sign-in form")
    ran = browser.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.cspProbe = 1';"
        "document.head.append(s); return window.cspProbe === 1"
    )
    assert ran is False
    violations = wait_for(lambda: csp_violations(console(browser)), 300, "the violation in the console")
    assert "inline script" in violations[0] and "script-src" in violations[0]


def test_the_api_docs_inline_script_runs_under_its_own_policy(browser, service):
    """/docs (Swagger UI) starts with an inline script, allowed by its hash: it runs (Swagger UI renders, or, where
    the CDN cannot be reached, the script fails on the missing bundle) and nothing is refused."""
    browser.get(f"{service.url}/docs")
    seen: list[str] = []

    def ran() -> bool:
        seen.extend(console(browser))
        rendered = browser.execute_script("return document.querySelector('.swagger-ui') !== null")
        return rendered or any("SwaggerUIBundle is not defined" in m for m in seen)

    wait_for(ran, 300, "the inline script to run")
    assert csp_violations(seen) == []


# ---- the run page's requests, plots, accessibility and phones -----------------------------------------------------

#: Accessibility checks written for these tests: WCAG contrast of visible text, labels, names, alt, lang.
A11Y_JS = (pathlib.Path(__file__).parent / "a11y_check.js").read_text()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def api_post(service: Any, key: str, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    r = httpx.post(f"{service.url}/v1/runs", json=body, headers=bearer(key), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 202, r.text
    return r.json()


def api_get(service: Any, key: str, path: str) -> dict[str, Any]:
    import httpx

    return httpx.get(f"{service.url}{path}", headers=bearer(key), timeout=HTTP_TIMEOUT_S).json()


def ended(service: Any, key: str, run_id: str) -> dict[str, Any]:
    return wait_for(
        lambda: (
            (i := api_get(service, key, f"/v1/runs/{run_id}"))["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") and i
        ),
        300,
        f"run {run_id} to end",
    )


BASE = {"model": {"family": "logistic_regression"}, "data": {"dataset": "builtin:breast_cancer"}, "seed": 4}
SMALL_TARGET_ESS = 100


@pytest.fixture(scope="module")
def wide_and_small(service: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two finished runs of alice: 64 chains with a name and a tag, and a 4-chain run until converged (to a bulk ESS
    of SMALL_TARGET_ESS: what the page shows of it is the same whatever the target)."""
    wide = api_post(
        service,
        ALICE,
        BASE | {"chains": 64, "num_shards": 2, "num_rounds": 60, "burn_in": 10, "name": "wide", "tags": {"team": "a"}},
    )
    small = api_post(
        service,
        ALICE,
        BASE | {"chains": 4, "num_shards": 2, "num_rounds": "auto", "target_ess": SMALL_TARGET_ESS, "name": "small"},
    )
    return ended(service, ALICE, wide["id"]), ended(service, ALICE, small["id"])


def open_page(driver: Any, url: str, hash_: str) -> None:
    driver.get(f"{url}/ui/{hash_}")


def severe(driver: Any) -> list[str]:
    """Console errors since the last read, other than the browser's note of a refused request (a 404 expected)."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]
    ]


def status_line(driver: Any) -> str:
    return driver.execute_script(
        "const s = document.getElementById('status-line'); return s.hidden ? '' : s.textContent"
    )


def settled(driver: Any, timeout: float = 60.0) -> None:
    """Wait until none of the page's requests is in flight, then a moment for what they render: instead of a fixed
    sleep, as long as the page needs and no longer."""
    idle = "return Object.values(window.rsDashboard.net.inflight).every(n => n === 0)"
    wait_for(lambda: driver.execute_script(idle), timeout, "the page's requests to come back")
    time.sleep(0.3)


def quiet(driver: Any, for_s: float, timeout: float = 120.0) -> None:
    """Wait until the page has sent no request and has none in flight for `for_s` seconds, or longer than the
    slowest answer so far: a resource asked for again while it loads goes again only after a wait as long as its
    answer took (class Resource), which on a loaded machine is longer than `for_s`."""
    probe = (
        "const n = window.rsDashboard.net; return [Object.values(n.count).reduce((a, b) => a + b, 0),"
        " Object.values(n.inflight).every(k => k === 0),"
        " Math.max(0, ...performance.getEntriesByType('resource')"
        " .filter(e => !e.name.includes('/events')).map(e => e.duration)) / 1000]"  # not the event streams
    )
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        sent, idle, slowest = driver.execute_script(probe)
        if sent != last or not idle:
            last, since = sent, time.monotonic()
        elif time.monotonic() - since >= max(for_s, 1.5 * slowest + 0.5):
            return
        time.sleep(0.1)
    raise AssertionError(f"the page did not go quiet for {for_s} s within {timeout} s")


def list_polls(driver: Any) -> int:
    """How many times the runs list was asked for (the page asks every 2 s)."""
    return driver.execute_script("return window.rsDashboard.net.count['GET /v1/runs'] || 0")


def plotted_axes(driver: Any) -> dict[str, list[str]]:
    return driver.execute_script("return window.rsDashboard.plots ? window.rsDashboard.plots.axes() : {}")


def test_64_chains_draw_every_plot_with_a_legend_and_no_error(browser, service, wide_and_small):
    from selenium.webdriver.common.by import By

    wide, _ = wide_and_small
    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get_log("browser")
    open_page(browser, service.url, f"#/run/{wide['id']}")
    axes = wait_for(
        lambda: (
            (a := plotted_axes(browser)).keys() >= {"trace", "hist", "rank", "autocorr", "ess", "forest", "pair"} and a
        ),
        120,
        "every plot",
    )
    name0 = wide["param_names"][0]
    assert axes["trace"] == ["draw", name0] and axes["hist"] == [name0, "density"]
    assert browser.execute_script("return window.rsDashboard.plotted()") == [60] * 64
    # the chain list is the legend: every chain, with a box to show or hide it
    labels = browser.execute_script("return [...document.querySelectorAll('#chains label')].map(l => l.textContent)")
    assert labels == [f"chain {c}" for c in range(64)]
    browser.find_elements(By.CSS_SELECTOR, "#chains input")[63].click()
    shown = browser.execute_script("return window.rsDashboard.plots.get('trace').series[64].show")
    assert shown is False
    # hovering a chain's entry highlights it in the per-chain plots (the others fade)
    alphas = browser.execute_script(
        "document.querySelectorAll('#chains label')[5].dispatchEvent(new Event('mouseenter'));"
        "const p = window.rsDashboard.plots; return [p.get('rank').series[6].alpha, p.get('rank').series[1].alpha]"
    )
    assert alphas[0] == 1 and alphas[1] < 1
    assert severe(browser) == [] and status_line(browser) == ""


def test_page_changes_mid_request_and_stray_errors_reach_the_status_line_not_the_console(
    browser, service, wide_and_small
):
    wide, small = wide_and_small
    sign_in(browser, service.url, ALICE)
    wait_for(lambda: "#/runs" in browser.current_url, what="the runs page")
    browser.get_log("browser")
    for hash_ in (f"#/run/{wide['id']}", "#/runs", f"#/run/{small['id']}", "#/submit", "#/operator", "#/runs"):
        browser.execute_script(f"location.hash = '{hash_}'")
        time.sleep(0.15)  # requests of the page left are still in flight
    settled(browser)  # every request sent has come back (and been handled) before the console is read
    assert severe(browser) == [] and status_line(browser) == ""
    # a page whose loading fails (here: the network, on a fresh load of the page) says so in the status line
    browser.refresh()
    wait_for(lambda: browser.execute_script("return document.getElementById('runs-body') !== null"), 30, "reload")
    browser.execute_script("window.fetch = () => Promise.reject(new Error('network down')); location.hash = '#/submit'")
    assert wait_for(lambda: status_line(browser), 10, "the status line") == "Could not show this page: network down"
    # an error nothing catches is shown there too, not left uncaught in the console
    browser.execute_script("setTimeout(() => { throw new Error('stray'); }, 0)")
    wait_for(lambda: status_line(browser).startswith("Something went wrong"), 10, "the stray error")
    assert severe(browser) == []


def test_switching_the_parameter_fetches_once_and_relabels_the_axes(browser, service, wide_and_small):
    from selenium.webdriver.support.ui import Select

    _, small = wide_and_small
    sign_in(browser, service.url, ALICE)
    wait_for(lambda: "#/runs" in browser.current_url, what="the runs page")
    opened = time.monotonic()  # before the page starts its timers
    open_page(browser, service.url, f"#/run/{small['id']}")
    wait_for(lambda: plotted_axes(browser).keys() >= {"trace", "rank", "pair", "forest"}, 120, "the plots")
    quiet(browser, 1.5)  # settled: a finished run asks for nothing more

    def urls() -> dict[str, int]:
        return browser.execute_script("return window.rsDashboard.net.urls")

    before = urls()
    Select(browser.find_element("id", "param")).select_by_value("3")
    name3 = small["param_names"][3]
    wait_for(lambda: plotted_axes(browser)["trace"] == ["draw", name3], 60, "the new trace")
    wait_for(lambda: name3 in plotted_axes(browser)["rank"][0], 60, "the new rank plot")
    time.sleep(2.5)
    after = urls()
    grew = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    rid = small["id"]
    # the page asks for a run whose event stream has ended every 15 s (SAFETY_POLL_MS): on a loaded machine the
    # page may have been open that long by now; those asks, and nothing else, may come on top of the switch's two
    safety_polls = grew.pop(f"GET /v1/runs/{rid}", 0)
    assert safety_polls <= (time.monotonic() - opened) // 15, (safety_polls, time.monotonic() - opened)
    assert grew == {
        f"GET /v1/runs/{rid}/trace?param=3&max_points=2000": 1,
        f"GET /v1/runs/{rid}/diagnostics?param=3": 1,
    }
    axes = plotted_axes(browser)
    assert axes["hist"][0] == name3 and axes["pair"][0] == name3
    assert name3 in axes["autocorr"][1] and name3 in axes["ess"][1]
    # the summary of a finished run was asked for once, and nothing is in flight twice
    assert after[f"GET /v1/runs/{rid}/summary"] == 1
    assert max(browser.execute_script("return window.rsDashboard.net.maxInflight").values()) == 1
    # honest progress of a run until converged: the targets, and why it stopped
    conv = browser.find_element("id", "run-convergence").text
    assert f"target {SMALL_TARGET_ESS}" in conv and "R-hat" in conv
    assert browser.find_element("id", "run-stop").text == "Stopped: converged."


def test_another_tenants_run_is_not_polled(browser, service, wide_and_small):
    from selenium.webdriver.common.by import By

    wide, _ = wide_and_small
    sign_in(browser, service.url, BOB)
    wait_for(lambda: "#/runs" in browser.current_url, what="bob's runs page")
    open_page(browser, service.url, f"#/run/{wide['id']}")
    msg = wait_for(lambda: browser.find_element(By.ID, "run-error").text, 60, "the not-found message")
    assert f"No run {wide['id']}" in msg
    total = "return Object.values(window.rsDashboard.net.count).reduce((a, b) => a + b, 0)"
    sent = browser.execute_script(total)
    time.sleep(4)
    assert browser.execute_script(total) == sent


def test_runs_list_names_tags_filters_focus_and_compare(browser, service, wide_and_small):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    wide, small = wide_and_small
    sign_in(browser, service.url, ALICE)
    wait_for(lambda: {wide["id"], small["id"]} <= run_ids_listed(browser), 60, "the runs")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{wide["id"]}"]')
    assert "wide" in row.text and "team=a" in row.text
    # focus on a row's link survives the 2-second refreshes (rows are updated in place)
    browser.execute_script(f"document.querySelector('tr[data-run=\"{wide['id']}\"] a').focus()")
    polls = list_polls(browser)
    wait_for(lambda: list_polls(browser) >= polls + 2, 30, "two refreshes of the list")
    settled(browser)
    assert browser.execute_script("return document.activeElement.textContent") == wide["id"]
    # filter by tag
    browser.find_element(By.ID, "tag-filter").send_keys("team:a")
    browser.find_element(By.CSS_SELECTOR, "#runs-filters button").click()
    wait_for(lambda: run_ids_listed(browser) == {wide["id"]}, 30, "only the tagged run")
    browser.find_element(By.ID, "tag-filter").clear()
    browser.find_element(By.ID, "name-filter").send_keys("small")
    browser.find_element(By.CSS_SELECTOR, "#runs-filters button").click()
    wait_for(lambda: run_ids_listed(browser) == {small["id"]}, 30, "only the named run")
    browser.find_element(By.ID, "name-filter").clear()
    browser.find_element(By.CSS_SELECTOR, "#runs-filters button").click()
    wait_for(lambda: {wide["id"], small["id"]} <= run_ids_listed(browser), 30, "every run again")
    # compare two runs side by side
    for rid in (wide["id"], small["id"]):
        browser.find_element(By.CSS_SELECTOR, f'input[value="{rid}"]').click()
    browser.find_element(By.ID, "compare").click()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#compare-table tr[data-param]"), 60, "the comparison")
    heads = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#compare-table th.run-head a")]
    assert heads == [f"wide ({wide['id']})", f"small ({small['id']})"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#compare-table tr[data-param]")) == 31
    # a status filter is the tenant's: it does not carry over to the next one signed in
    browser.get(f"{service.url}/ui/#/runs")
    Select(wait_for(lambda: browser.find_element(By.ID, "status-filter"))).select_by_visible_text("FAILED")
    wait_for(lambda: run_ids_listed(browser) == set(), 30, "no FAILED runs")
    browser.find_element(By.ID, "signout").click()  # and bob signs in in the same tab (session storage kept)
    box = wait_for(lambda: browser.find_element(By.ID, "key"), what="the sign-in form")
    box.send_keys(BOB)
    browser.find_element(By.CSS_SELECTOR, "#signin-form button").click()
    wait_for(lambda: "#/runs" in browser.current_url, what="bob's runs page")
    assert wait_for(lambda: browser.find_element(By.ID, "status-filter")).get_attribute("value") == ""


def test_the_sign_in_page_hides_the_nav_and_says_why_a_key_fails(browser, service):
    from selenium.webdriver.common.by import By

    browser.get(f"{service.url}/ui/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{service.url}/ui/#/runs")
    browser.refresh()
    box = wait_for(lambda: browser.find_element(By.ID, "key"), what="the sign-in form")
    assert not browser.find_element(By.ID, "nav").is_displayed()
    box.send_keys("wrong-key-wrong-key")
    browser.find_element(By.CSS_SELECTOR, "#signin-form button").click()
    msg = wait_for(lambda: browser.find_element(By.ID, "signin-error").text, 30, "the message")
    assert "refused" in msg
    assert browser.find_element(By.ID, "key").get_attribute("value") == "wrong-key-wrong-key"


def test_hand_edits_to_the_json_are_sent_as_edited(browser, service):
    from selenium.webdriver.common.by import By

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: "#/runs" in browser.current_url, what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    box = wait_for(lambda: browser.find_element(By.ID, "spec-json"), what="the form")
    wait_for(lambda: '"family"' in box.get_attribute("value"), what="the request")
    spec = json.loads(box.get_attribute("value"))
    # 2 chains × 4e6 draws × 31 parameters × 8 bytes is over the service's RAYSAMPLER_WARN_DRAW_BYTES (1e9)
    spec |= {"seed": 98765, "num_rounds": 4_000_000, "chains": 2, "name": "edited-by-hand", "burn_in": 5}
    box.clear()
    box.send_keys(json.dumps(spec))
    assert browser.find_element(By.ID, "spec-note").is_displayed()
    chains = browser.find_element(By.ID, "f-chains")
    chains.clear()
    chains.send_keys("7")  # a form change no longer rewrites the hand-edited request
    assert json.loads(box.get_attribute("value"))["chains"] == 2
    assert browser.find_element(By.ID, "spec-note").is_displayed()
    browser.find_element(By.ID, "submit").click()
    # the service accepted it with a warning: the page says so before moving on
    warning = wait_for(lambda: browser.find_element(By.ID, "submit-warnings").text, 60, "the submit's warning")
    assert "RAYSAMPLER_WARN_DRAW_BYTES" in warning
    browser.find_element(By.CSS_SELECTOR, "#submit-warnings a").click()
    rid = wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )
    info = api_get(service, ALICE, f"/v1/runs/{rid}")
    assert info["spec"]["seed"] == 98765 and info["spec"]["chains"] == 2 and info["name"] == "edited-by-hand"
    import httpx

    httpx.post(f"{service.url}/v1/runs/{rid}/cancel", headers=bearer(ALICE), timeout=HTTP_TIMEOUT_S)
    ended(service, ALICE, rid)


PHONES = [(390, 844), (360, 740)]


@pytest.mark.parametrize("width,height", [(1400, 1000), *PHONES])
def test_every_page_is_accessible_and_fits_the_screen(browser, service, wide_and_small, width, height):
    wide, small = wide_and_small
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 800},
    )
    try:
        sign_in(browser, service.url, ALICE)
        wait_for(lambda: "#/runs" in browser.current_url, what="the runs page")
        pages = {
            "#/runs": "#runs-body tr",
            f"#/run/{small['id']}": "#summary tr[data-param]",
            f"#/run/{wide['id']}": "#summary td.bad",  # the highlighted cells of a run that has not converged
            "#/submit": "#f-family option",
            f"#/compare/{wide['id']},{small['id']}": "#compare-table tr[data-param]",
            "#/operator": "#op-quota tr",
        }
        for hash_, ready in pages.items():
            open_page(browser, service.url, hash_)
            probe = f"return document.querySelector('{ready}') !== null"
            wait_for(lambda p=probe: browser.execute_script(p), 120, hash_)
            settled(browser)
            # a phone widens its layout viewport to fit what overflows: compare with the screen's width
            wide = browser.execute_script("return Math.max(document.documentElement.scrollWidth, innerWidth)")
            assert wide <= width, (hash_, width, wide)
            assert browser.execute_script(A11Y_JS) == [], hash_
        browser.get(f"{service.url}/ui/#/signin")
        wait_for(lambda: browser.execute_script("return document.getElementById('key') !== null"), what="sign-in")
        assert browser.execute_script(A11Y_JS) == []
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture(scope="module")
def quota_service(tmp_path_factory: Any) -> Iterator[Any]:
    """A second service, sampling in-process (executor local: no Ray), that allows alice one active run at a time."""
    from raysampler.service.local import LocalService

    root = tmp_path_factory.mktemp("quota-service")
    env = {"RAYSAMPLER_EXECUTOR": "local", "RAYSAMPLER_QUOTA_MAX_ACTIVE_RUNS": "1", "RAYSAMPLER_POLL_S": "0.05"}
    svc = LocalService(root / "data", keys=SERVICE_KEYS, env=env, log=root / "server.log")
    svc.start()
    yield svc
    svc.stop()


def test_a_quota_refusal_is_shown_and_the_operator_view_counts_against_the_limit(browser, quota_service):
    from selenium.webdriver.common.by import By

    long = api_post(quota_service, ALICE, BASE | {"chains": 2, "num_shards": 2, "num_rounds": 10_000_000})
    try:
        sign_in(browser, quota_service.url, ALICE)
        wait_for(lambda: "#/runs" in browser.current_url, what="the runs page")
        browser.get(f"{quota_service.url}/ui/#/submit")
        wait_for(lambda: '"family"' in browser.find_element(By.ID, "spec-json").get_attribute("value"), 60, "form")
        browser.find_element(By.ID, "submit").click()
        msg = wait_for(lambda: browser.find_element(By.ID, "submit-error").text, 60, "the refusal")
        assert msg.startswith("Refused by the tenant's quota (429):") and "QUOTA_MAX_ACTIVE_RUNS" in msg
        assert "#/submit" in browser.current_url
        open_page(browser, quota_service.url, "#/operator")
        quota = wait_for(lambda: browser.find_element(By.ID, "op-quota").text, 60, "the quota table")
        assert "active runs (pending + running) 1 1" in quota
        assert browser.find_element(By.ID, "op-nodes-none").is_displayed()  # executor local: no Ray nodes
        assert "executor local" in browser.find_element(By.ID, "op-summary").text
    finally:
        import httpx

        httpx.post(f"{quota_service.url}/v1/runs/{long['id']}/cancel", headers=bearer(ALICE), timeout=HTTP_TIMEOUT_S)
        ended(quota_service, ALICE, long["id"])


def test_a_failing_resource_is_retried_with_growing_waits(browser, service, wide_and_small):
    from selenium.webdriver.support.ui import Select

    _, small = wide_and_small
    sign_in(browser, service.url, ALICE)
    wait_for(lambda: "#/runs" in browser.current_url, what="the runs page")
    open_page(browser, service.url, f"#/run/{small['id']}")
    wait_for(lambda: plotted_axes(browser).keys() >= {"trace", "rank"}, 120, "the plots")
    key = f"GET /v1/runs/{small['id']}/trace"
    browser.execute_script(  # the network fails for trace requests only, and says when each try came
        "window.realFetch = window.fetch; window.traceTries = [];"
        "window.fetch = (url, o) => url.includes('/trace')"
        " ? (traceTries.push(performance.now()), Promise.reject(new TypeError('offline'))) : realFetch(url, o)"
    )
    before = browser.execute_script(f"return window.rsDashboard.net.count['{key}']")
    Select(browser.find_element("id", "param")).select_by_value("2")
    # tries at about 0, 1 and 3 s: waits of 1 then 2 s after each failure (then 4, 8, ... s). Timed in the page
    # rather than counted over a fixed sleep: a retry with no wait, a constant wait or one that does not grow fails
    # the bounds below, and the three tries came within the 8.5 s the back-off allows for three to five of them.
    times = wait_for(lambda: (t := browser.execute_script("return window.traceTries")) and len(t) >= 3 and t, 30)
    first_wait, second_wait = (times[1] - times[0]) / 1e3, (times[2] - times[1]) / 1e3
    assert first_wait >= 0.9 and second_wait >= max(1.9, first_wait + 0.5), (first_wait, second_wait)
    assert first_wait + second_wait <= 8.5, (first_wait, second_wait)
    counted, fetched = browser.execute_script(f"return [window.rsDashboard.net.count['{key}'], traceTries.length]")
    assert counted - before == fetched, (counted - before, fetched)  # each try is one counted request
    assert browser.find_element("id", "trace-note").text == "offline (retrying)"
    browser.execute_script("window.fetch = window.realFetch")
    name2 = small["param_names"][2]
    wait_for(lambda: plotted_axes(browser)["trace"] == ["draw", name2], 30, "the trace once the network is back")
    assert status_line(browser) == ""


def test_submit_form_offers_group_effects_and_known_noise(browser, service):
    """The form's group-effects and noise-sd fields go into the JSON it sends; a hierarchical run on the built-in
    hospitals data with a correlated intercept and slope reports brms names (sd_hospital,
    cor_hospital[(Intercept),age], r_hospital[label,(Intercept)])."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "f-dataset")).options) > 1, what="the data sets")
    Select(browser.find_element(By.ID, "f-family")).select_by_value("linear_regression")
    browser.find_element(By.ID, "f-noise-sd").send_keys("0.5")
    spec = browser.find_element(By.ID, "spec-json").get_attribute("value")
    assert '"noise_sd": 0.5' in spec, spec
    browser.find_element(By.ID, "f-noise-sd").clear()
    browser.find_element(By.ID, "f-noise-sd").send_keys("se")
    assert '"noise_sd": "se"' in browser.find_element(By.ID, "spec-json").get_attribute("value")
    browser.find_element(By.ID, "f-noise-sd").clear()
    Select(browser.find_element(By.ID, "f-family")).select_by_value("logistic_regression")
    Select(browser.find_element(By.ID, "f-dataset")).select_by_value("builtin:hospitals")
    browser.find_element(By.ID, "f-group").send_keys("hospital")
    browser.find_element(By.ID, "f-group-slopes").send_keys("age")
    browser.find_element(By.ID, "f-group-correlated").click()
    fill_form(browser, (("f-chains", "2"), ("f-burn", "10")), rounds=30)
    spec = browser.find_element(By.ID, "spec-json").get_attribute("value")
    assert '"group_effects"' in spec and '"slopes"' in spec and '"noise_sd"' not in spec, spec
    assert '"correlated": true' in spec, spec
    browser.find_element(By.ID, "submit").click()
    wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )
    names = wait_for(
        lambda: browser.execute_script("const i = window.rsDashboard.state.info; return i && i.param_names"),
        300,
        "the run's parameter names",
    )
    assert "sd_hospital[(Intercept)]" in names and "sd_hospital[age]" in names, names
    assert "r_hospital[1,(Intercept)]" in names and "r_hospital[1,age]" in names, names
    assert "cor_hospital[(Intercept),age]" in names, names


def test_the_formula_form_offers_each_family_its_own_priors(browser, service):
    """The formula form's family list holds the families brms users fit; σ's prior goes only to the families with a
    σ (gaussian, lognormal, student), the gamma prior of the second field to the family's own parameter by brms'
    class: nu (student), shape (Gamma, weibull), phi (Beta); the exponential has neither; the form stays accessible."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "f-formula-family")).options) > 1, what="the families")
    browser.find_element(By.CSS_SELECTOR, "input[name=model-kind][value=formula]").click()
    formula = browser.find_element(By.ID, "f-formula")
    formula.clear()
    formula.send_keys("y | cens(censored) ~ age")
    for field, value in (("f-sigma-scale", "2"), ("f-own-shape", "2"), ("f-own-rate", "0.1")):
        browser.find_element(By.ID, field).send_keys(value)
    gamma = {"gamma": {"shape": 2, "rate": 0.1}}
    expected = {
        "student": {"sigma_prior": {"half_normal": {"scale": 2}}, "nu_prior": gamma},
        "Gamma": {"shape_prior": gamma},
        "Beta": {"phi_prior": gamma},
        "weibull": {"shape_prior": gamma},
        "exponential": {},
        "zero_inflated_poisson": {},  # its zi prior (a beta) is the JSON's to set
        "zero_inflated_negbinomial": {"phi_prior": gamma},
        "hurdle_poisson": {},  # its hu prior (a beta) is the JSON's to set
        "hurdle_negbinomial": {"phi_prior": gamma},
        "cumulative": {},  # its threshold priors are the JSON's to set
    }
    for family, priors in expected.items():
        Select(browser.find_element(By.ID, "f-formula-family")).select_by_value(family)
        model = json.loads(browser.find_element(By.ID, "spec-json").get_attribute("value"))["model"]
        assert model == {
            "formula": "y | cens(censored) ~ age",
            "family": family,
            "coef_prior": {"normal": {"scale": 2.5}},
            **priors,
        }, model
    assert browser.execute_script(A11Y_JS) == []


def test_the_formula_form_sends_single_coefficient_priors_and_a_sigma_formula(browser, service):
    """Priors of single coefficients (name = sd of a normal) go to model.coef_priors, a sigma formula to
    model.sigma_formula in place of sigma's prior; a bad sd is the API's 422 shown at the priors' field, naming the
    coefficient; the corrected run reports its distributional coefficients b_sigma[...]."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "f-formula-family")).options) > 1, what="the families")
    Select(browser.find_element(By.ID, "f-dataset")).select_by_value("builtin:hospitals")
    browser.find_element(By.CSS_SELECTOR, "input[name=model-kind][value=formula]").click()
    Select(browser.find_element(By.ID, "f-formula-family")).select_by_value("gaussian")
    formula = browser.find_element(By.ID, "f-formula")
    formula.clear()
    formula.send_keys("y ~ age + severity")
    fields = [("f-coef-priors", "age = 1, severity = wide"), ("f-sigma-formula", "~ age"), ("f-sigma-scale", "2")]
    fill_form(browser, [*fields, ("f-chains", "2"), ("f-burn", "10")], rounds=30)
    model = json.loads(browser.find_element(By.ID, "spec-json").get_attribute("value"))["model"]
    assert model == {
        "formula": "y ~ age + severity",
        "family": "gaussian",
        "coef_prior": {"normal": {"scale": 2.5}},
        "coef_priors": {"age": {"normal": {"scale": 1}}, "severity": {"normal": {"scale": "wide"}}},
        "sigma_formula": "~ age",
    }, model
    assert browser.execute_script(A11Y_JS) == []
    browser.find_element(By.ID, "submit").click()
    note = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, '.field[data-loc="model.coef_priors"] .field-error'),
        what="the error at the coefficients' priors",
    )
    assert "model.coef_priors.severity" in note.text, note.text
    assert "#/submit" in browser.current_url  # nothing was submitted
    box = browser.find_element(By.ID, "f-coef-priors")
    box.clear()
    box.send_keys("age = 1, severity = 3")
    browser.find_element(By.ID, "submit").click()
    run_id = wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )
    wait_for(lambda: browser.find_element(By.ID, "run-status").text == "SUCCEEDED", 300, f"run {run_id} to finish")
    info = api_get(service, ALICE, f"/v1/runs/{run_id}")
    assert {"b_sigma[(Intercept)]", "b_sigma[age]"} <= set(info["param_names"]), info["param_names"]
    assert info["spec"]["model"]["coef_priors"]["severity"]["normal"]["scale"] == 3.0


def test_checks_loo_held_out_metrics_reliability_curve_and_loo_comparison(browser, service):
    """The run page computes PSIS-LOO (its flat-row band, and moment matching when ticked) and held-out metrics (on
    the shards) and draws a classifier's reliability curve; the compare view ranks runs by PSIS-LOO with the paired
    SE and stacking weights."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ids = []
    for seed in (1, 2):
        body = {
            "model": {"family": "logistic_regression", "prior_scale": 1.0},
            "data": {"dataset": "builtin:breast_cancer"},
            "num_rounds": 60, "burn_in": 20, "chains": 2, "num_shards": 2, "seed": seed,
        }  # fmt: skip
        ids.append(api_post(service, ALICE, body)["id"])
    for rid in ids:
        wait_for(lambda rid=rid: api_get(service, ALICE, f"/v1/runs/{rid}")["status"] == "SUCCEEDED", 300, "the end")
    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/run/{ids[0]}")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "eval-data")).options) > 1, what="the held-out choices")
    browser.find_element(By.ID, "loo-btn").click()
    loo = wait_for(lambda: browser.find_element(By.ID, "loo-table").text, 120, "the LOO table")
    assert "elpd_loo" in loo and "Pareto k" in loo and "flat rows" in loo
    assert not browser.find_element(By.ID, "loo-mm-table").is_displayed()
    browser.find_element(By.ID, "r2-btn").click()
    r2 = wait_for(lambda: browser.find_element(By.ID, "r2-table").text, 120, "the R² table")
    want = api_get(service, ALICE, f"/v1/runs/{ids[0]}/r2")
    assert "Bayesian R²" in r2 and f"{want['estimate']:.3f}" in r2 and "95% interval" in r2
    browser.find_element(By.ID, "loo-mm").click()
    browser.find_element(By.ID, "loo-btn").click()
    matched = wait_for(
        lambda: (
            browser.find_element(By.ID, "loo-mm-table").is_displayed()
            and browser.find_element(By.ID, "loo-mm-table").text
        ),
        120,
        "the moment-matching table",
    )
    assert "k (matched)" in matched
    Select(browser.find_element(By.ID, "eval-data")).select_by_value("builtin:breast_cancer")
    browser.find_element(By.ID, "eval-btn").click()
    metrics = wait_for(lambda: browser.find_element(By.ID, "eval-table").text, 120, "the held-out metrics")
    assert "accuracy" in metrics and "ece" in metrics
    assert browser.find_element(By.ID, "reliability-fig").is_displayed()
    assert browser.execute_script("return window.rsDashboard.plots.axes().reliability") == [
        "confidence (predicted class)",
        "accuracy",
    ]
    browser.get(f"{service.url}/ui/#/compare/{','.join(ids)}")
    button = wait_for(lambda: (b := browser.find_element(By.ID, "loo-compare")).is_enabled() and b, what="compare")
    Select(browser.find_element(By.ID, "loo-compare-method")).select_by_value("stacking")
    button.click()
    rows = wait_for(
        lambda: (
            browser.find_elements(By.CSS_SELECTOR, "#loo-compare-table tr")[1:]
            or (
                browser.find_element(By.ID, "loo-compare-error").text
                and pytest.fail(browser.find_element(By.ID, "loo-compare-error").text)
            )
        ),
        120,
        "the LOO comparison",
    )
    assert len(rows) == 2 and {r.text.split()[0] for r in rows} == set(ids)
    assert "weight (stacking)" in browser.find_element(By.ID, "loo-compare-table").text
    assert not [m for m in console(browser) if "SEVERE" in m], "console errors"


def test_a_formula_run_from_the_form_its_effects_and_its_predictive_check(browser, service):
    """The form sends a formula model (the formula, brms' family, priors by kind) on the built-in hospitals data; the
    run page shows brms' tables (coef: each hospital's coefficients) and posterior predictive checks drawn at the
    shards: a density overlay, histograms (0/1: one bin per value) and a statistic against its observed value."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    families = wait_for(
        lambda: [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "f-formula-family")).options],
        what="the families",
    )
    assert {"gaussian", "bernoulli", "lognormal", "student", "Gamma", "Beta", "weibull", "exponential"} <= set(
        families
    ), families
    Select(browser.find_element(By.ID, "f-dataset")).select_by_value("builtin:hospitals")
    browser.find_element(By.CSS_SELECTOR, "input[name=model-kind][value=formula]").click()
    assert browser.find_element(By.ID, "f-formula").is_displayed()
    assert not browser.find_element(By.ID, "f-family").is_displayed()
    browser.find_element(By.ID, "f-sd-scale").send_keys("1")
    for field, value in (("f-chains", "2"), ("f-burn", "10")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "f-auto").click()
    rounds = browser.find_element(By.ID, "f-rounds")
    rounds.clear()
    rounds.send_keys("40")
    spec = json.loads(browser.find_element(By.ID, "spec-json").get_attribute("value"))
    assert spec["model"] == {
        "formula": "y ~ age + severity + (1 | hospital)",
        "family": "bernoulli",
        "coef_prior": {"normal": {"scale": 2.5}},
        "sd_prior": {"half_normal": {"scale": 1}},
    }, spec
    assert browser.execute_script(A11Y_JS) == []  # the formula's fields too
    browser.find_element(By.ID, "submit").click()
    run_id = wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )
    wait_for(lambda: browser.find_element(By.ID, "run-status").text == "SUCCEEDED", 300, f"run {run_id} to finish")
    Select(browser.find_element(By.ID, "effects-kind")).select_by_value("coef")
    browser.find_element(By.ID, "effects-btn").click()
    rows = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#effects-table tr")[1:], 120, "the coef table")
    first = rows[0].text
    assert first.startswith("hospital 1, (Intercept)"), first
    assert browser.find_element(By.CSS_SELECTOR, "#effects-table tr").text.split()[-4:] == [
        "Estimate", "Est.Error", "Q2.5", "Q97.5"
    ]  # fmt: skip

    def check(kind: str) -> dict[str, Any]:
        Select(browser.find_element(By.ID, "ppc-kind")).select_by_value(kind)
        browser.find_element(By.ID, "ppc-btn").click()
        return wait_for(
            lambda: (
                browser.execute_script(f"const c = window.rsDashboard.state.ppc; return c && c.kind === '{kind}' && c")
                or (
                    browser.find_element(By.ID, "ppc-error").text
                    and pytest.fail(browser.find_element(By.ID, "ppc-error").text)
                )
            ),
            120,
            f"the {kind} check",
        )

    dens = check("dens")
    assert len(dens["replicated"]) == 10 and len(dens["grid"]) == 512
    assert plotted_axes(browser)["ppc"] == ["y", "density"]
    hist = check("hist")
    assert hist["edges"] == [-0.5, 0.5, 1.5] and sum(hist["observed"]) == hist["n"]
    assert plotted_axes(browser)["ppc"] == ["y", "rows"]
    Select(browser.find_element(By.ID, "ppc-kind")).select_by_value("stat")  # the statistic is chosen for "stat"
    Select(browser.find_element(By.ID, "ppc-stat")).select_by_value("sd")
    stat = check("stat")
    assert stat["stat"] == "sd" and len(stat["replicated"]) == 80  # every draw: 2 chains of 40
    assert "P(T(y_rep) ≥ T(y))" in browser.find_element(By.ID, "ppc-note").text
    assert plotted_axes(browser)["ppc"] == ["sd (line: the observed y's)", "replicated data sets"]
    assert browser.execute_script(A11Y_JS) == []
    assert not [m for m in console(browser) if "SEVERE" in m], "console errors"


def test_the_secure_sums_box_goes_into_the_request_and_the_workers_panel_shows_each_sites_ledger(browser, service):
    """Ticking "secure sums" sets the request's secure_sums; the run's workers panel then shows each site's bytes
    masked / sealed / plain, with every kind of message in the cell's tooltip."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "f-dataset")).options) > 1, what="the data sets")
    Select(browser.find_element(By.ID, "f-dataset")).select_by_value("builtin:breast_cancer")
    assert '"secure_sums"' not in browser.find_element(By.ID, "spec-json").get_attribute("value")
    browser.find_element(By.ID, "f-secure-sums").click()
    for field, value in (("f-chains", "2"), ("f-burn", "10"), ("f-shards-n", "2")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "f-auto").click()
    rounds = browser.find_element(By.ID, "f-rounds")
    rounds.clear()
    rounds.send_keys("30")
    assert '"secure_sums": true' in browser.find_element(By.ID, "spec-json").get_attribute("value")
    browser.find_element(By.ID, "submit").click()
    wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )

    def ledgers() -> list | None:
        """Both workers' ledger cells once each counts masked bytes (the set-up's plain messages come first)."""
        got = browser.execute_script(
            "return [...document.querySelectorAll('#workers tr')].slice(1).map(r => r.lastElementChild)"
            ".filter(c => c.textContent !== '–' && !c.textContent.startsWith('0 B')).map(c => [c.textContent, c.title])"
        )
        return got if len(got) == 2 else None

    cells = wait_for(ledgers, 300, "the workers' ledgers")
    assert len(cells) == 2, cells
    for text, title in cells:
        masked = text.split(" / ")[0]
        assert masked.endswith(("B", "KiB")) and masked != "0 B", text
        assert "z/rho [2×31]" in title and "masked" in title and "local_accept" in title, title


def test_the_dp_fields_go_into_the_request_and_the_run_page_shows_each_sites_budget_spent(browser, service):
    """Ticking the DP mode enables its fields and puts privacy {epsilon, delta, clip, clip_rule} into the request;
    the run (stopped by its budget) shows, per site, the ε it spent and its clip rate, as the REST answer has them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service.url, ALICE)
    wait_for(lambda: browser.find_element(By.ID, "runs-body"), what="the runs page")
    browser.get(f"{service.url}/ui/#/submit")
    wait_for(lambda: len(Select(browser.find_element(By.ID, "f-dataset")).options) > 1, what="the data sets")
    Select(browser.find_element(By.ID, "f-dataset")).select_by_value("builtin:breast_cancer")
    assert not browser.find_element(By.ID, "f-dp-epsilon").is_enabled()
    browser.find_element(By.ID, "f-dp").click()
    assert browser.find_element(By.ID, "f-dp-epsilon").is_enabled()
    for field, value in (("f-dp-epsilon", "0.5"), ("f-dp-clip", "2"), ("f-chains", "2"), ("f-shards-n", "2")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "f-auto").click()
    rounds = browser.find_element(By.ID, "f-rounds")
    rounds.clear()
    rounds.send_keys("100000")
    spec = json.loads(browser.find_element(By.ID, "spec-json").get_attribute("value"))
    assert spec["privacy"] == {"epsilon": 0.5, "delta": 1e-5, "clip": 2, "clip_rule": "gradient"}, spec
    browser.find_element(By.ID, "submit").click()
    run_id = wait_for(
        lambda: browser.execute_script("const m = location.hash.match(/^#\\/run\\/(.+)$/); return m && m[1]"),
        what="the run page",
    )
    wait_for(lambda: browser.find_element(By.ID, "run-status").text == "SUCCEEDED", 300, f"run {run_id} to finish")
    info = api_get(service, ALICE, f"/v1/runs/{run_id}")
    assert info["stop_reason"] == "privacy_budget", info["stop_reason"]
    line = wait_for(lambda: "spent:" in (t := browser.find_element(By.ID, "run-privacy").text) and t, 60, "ε spent")
    assert "ε ≤ 0.5 per site" in line, line
    for w in info["workers"]:
        assert f"ε {w['epsilon_spent']:.3f}" in line and w["epsilon_spent"] <= 0.5, line
