"""The dashboard at /ui in a real browser (headless Debian Chromium driven by Selenium) against a real
`raysampler serve`: sign-in, a run submitted from the form appears in the list, its trace plot gains points while
it samples (read from the plotted data), the summary shows every parameter, cancel, a refused key, tenant
isolation, and an invalid form value shown at its field. All of it under the service's Content-Security-Policy:
a violation the browser reports in its console fails the test it happened in."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from conftest import SERVICE_KEYS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
T = TypeVar("T")
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


def run_ids_listed(driver: Any) -> set[str]:
    return set(driver.execute_script("return [...document.querySelectorAll('#runs-body tr')].map(r => r.dataset.run)"))


def test_a_wrong_key_is_refused(browser, service):
    from selenium.webdriver.common.by import By

    sign_in(browser, service.url, "not-a-valid-key-000")
    msg = wait_for(lambda: browser.find_element(By.ID, "signin-error").text, what="the refusal")
    assert "refused" in msg
    assert browser.execute_script("return sessionStorage.getItem('raysampler.apiKey')") is None


def test_submit_watch_the_trace_grow_read_the_summary_and_cancel(browser, service):
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

    # the run is listed for its tenant
    browser.get(f"{service.url}/ui/#/runs")
    wait_for(lambda: run_id in run_ids_listed(browser), 300, "the run in the list")

    # cancel from its page
    browser.get(f"{service.url}/ui/#/run/{run_id}")
    cancel = wait_for(lambda: (b := browser.find_element(By.ID, "cancel")).is_enabled() and b, what="cancel")
    cancel.click()
    wait_for(lambda: browser.find_element(By.ID, "run-status").text == "CANCELLED", 300, "CANCELLED")

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
    chains = wait_for(lambda: browser.find_element(By.ID, "f-chains"), what="the form")
    chains.clear()
    chains.send_keys("0")
    browser.find_element(By.ID, "submit").click()
    note = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, '.field[data-loc="chains"] .field-error'),
        what="the error at the chains field",
    )
    assert "chains" in note.text and "greater than" in note.text
    assert "#/submit" in browser.current_url  # nothing was submitted


def test_the_dashboard_is_served_under_the_strict_policy(service):
    import httpx

    from api.security import STRICT_CSP

    for path in ("/ui/", "/ui/app.js", "/ui/app.css", "/ui/vendor/uPlot.iife.min.js"):
        r = httpx.get(service.url + path)
        assert r.status_code == 200 and r.headers["Content-Security-Policy"] == STRICT_CSP, path
        assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["Referrer-Policy"] == "no-referrer"
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
