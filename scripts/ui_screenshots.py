"""Screenshots of the dashboard for docs/: a local service, two runs (one finished, one sampling), then the runs list
and a run page in headless Chromium. Run by hand: python scripts/ui_screenshots.py (needs chromium, chromedriver)."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from raysampler.client import Client
from raysampler.service.local import LocalService

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
KEY = "screenshot-key-0123456789"


def main() -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="rs-shots-"))
    svc = LocalService(root / "data", keys={"demo": KEY}, env={"RAY_AUTH_MODE": "disabled"}, log=root / "server.log")
    svc.start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1800",
        "--disable-background-networking",
        "--hide-scrollbars",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)
    try:
        client = Client(svc.url, api_key=KEY)
        base = {"data": {"dataset": "builtin:breast_cancer"}, "num_shards": 4, "seed": 1}
        done = client.submit(base | {"model": {"family": "logistic_regression"}, "chains": 4, "num_rounds": 3000})
        done.wait()
        live = client.submit(
            base | {"model": {"family": "logistic_regression"}, "chains": 8, "num_rounds": 400000, "burn_in": 200}
        )
        driver.get(f"{svc.url}/ui/#/signin")
        driver.find_element(By.ID, "key").send_keys(KEY)
        driver.find_element(By.CSS_SELECTOR, "#signin-form button").click()
        time.sleep(4)
        driver.save_screenshot(str(DOCS / "ui_runs.png"))
        driver.get(f"{svc.url}/ui/#/run/{live.id}")
        time.sleep(10)
        driver.save_screenshot(str(DOCS / "ui_run.png"))
        live.cancel()
    finally:
        driver.quit()
        svc.stop()
    print(f"wrote {DOCS / 'ui_runs.png'} and {DOCS / 'ui_run.png'}")


if __name__ == "__main__":
    main()
