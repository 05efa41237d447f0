"""Screenshots of the dashboard for docs/: a local service, a few runs (finished, sampling, waiting), then the runs
list, a run page, the operator view and a run page on a phone in headless Chromium. Run by hand:
python scripts/ui_screenshots.py (needs chromium, chromedriver; Pillow, when installed, reduces the PNGs to a
128-colour palette to keep them small)."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import time
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from raysampler.client import Client
from raysampler.service.local import LocalService

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
KEY = "screenshot-key-0123456789"


def shoot(driver: Any, name: str, width: int, height: int, mobile: bool = False) -> None:
    """The page at `width` × `height` CSS pixels as docs/<name>, palette-reduced when Pillow is installed."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    time.sleep(2)
    path = DOCS / name
    driver.save_screenshot(str(path))
    try:
        from PIL import Image
    except ImportError:
        pass
    else:
        with Image.open(path) as im:
            small = im.convert("RGB").quantize(colors=128)
        small.save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size // 1024} kB)")


def main() -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="rs-shots-"))
    svc = LocalService(root / "data", keys={"demo": KEY}, env={"RAY_AUTH_MODE": "disabled"}, log=root / "server.log")
    svc.start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    flags = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--hide-scrollbars")
    for flag in flags:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)
    try:
        client = Client(svc.url, api_key=KEY)
        base = {"data": {"dataset": "builtin:breast_cancer"}, "num_shards": 4, "seed": 1}
        model = {"model": {"family": "logistic_regression"}}
        done = client.submit(base | model | {"chains": 4, "num_rounds": "auto"}, name="baseline", tags={"team": "a"})
        done.wait()
        live = client.submit(
            base | model | {"chains": 8, "num_rounds": 400000, "burn_in": 200}, name="long", tags={"team": "a"}
        )
        waiting = client.submit(base | model | {"chains": 4, "num_rounds": 2000}, name="next", tags={"team": "b"})
        driver.get(f"{svc.url}/ui/#/signin")
        driver.find_element(By.ID, "key").send_keys(KEY)
        driver.find_element(By.CSS_SELECTOR, "#signin-form button").click()
        time.sleep(4)
        shoot(driver, "ui_runs.png", 1400, 420)
        driver.get(f"{svc.url}/ui/#/run/{live.id}")
        time.sleep(12)
        shoot(driver, "ui_run.png", 1400, 1500)
        driver.get(f"{svc.url}/ui/#/operator")
        time.sleep(4)
        shoot(driver, "ui_operator.png", 1400, 520)
        driver.get(f"{svc.url}/ui/#/run/{done.id}")
        time.sleep(6)
        shoot(driver, "ui_phone.png", 390, 844, mobile=True)
        live.cancel()
        waiting.cancel()
    finally:
        driver.quit()
        svc.stop()


if __name__ == "__main__":
    main()
