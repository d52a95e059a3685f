"""Headless Chromium through Selenium and Debian's chromedriver, for the browser tests. No
download: the browser and the driver are the machine's (scripts/ensure-system-deps.sh)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def chrome(width: int = 1280, height: int = 2000) -> Iterator:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.fail("chromium and chromedriver are needed: scripts/ensure-system-deps.sh installs them "
                    "(apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    profile = tempfile.mkdtemp(prefix="streamops-chrome-")
    # The closed network refuses Chromium's background connections; these flags keep it quiet.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--hide-scrollbars", f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def images_drawn(driver) -> bool:
    """Every <img> has loaded and decoded to a real size: the page is fully drawn."""
    return driver.execute_script(
        "const imgs = Array.from(document.images);"
        "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);")


def full_page(driver, width: int) -> int:
    """Make the viewport as tall as the page, so that a screenshot holds all of it. Returns the height."""
    height = int(driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]["height"])
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return height
