"""Debian's headless Chromium and its WebDriver, installed when missing, driven by Selenium.

A test that needs a browser never skips: when Chromium is missing it is installed with
apt-get (the machines run as root and reach Debian's mirrors), and when that fails the test
fails, saying what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from selenium import webdriver

PACKAGES = ("chromium", "chromium-driver")
INSTALL_TIMEOUT_S = 1200


def _found() -> tuple[str, str] | None:
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def chromium_paths() -> tuple[str, str]:
    """The paths of ``chromium`` and ``chromedriver``, installed with apt-get if missing."""
    found = _found()
    if found is not None:
        return found
    advice = f"install Debian's {' and '.join(PACKAGES)}: apt-get install {' '.join(PACKAGES)}"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.fail(f"the trace viewer's browser tests need Chromium: {advice} (as root)")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
    ):
        try:
            done = subprocess.run(
                command,
                env=environment,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"`{' '.join(command)}` took over {INSTALL_TIMEOUT_S} s; {advice}")
        if done.returncode != 0:
            pytest.fail(
                f"`{' '.join(command)}` exited {done.returncode}; {advice}\n{done.stderr[-3000:]}"
            )
    found = _found()
    if found is None:
        pytest.fail(
            f"apt-get installed {' '.join(PACKAGES)}, yet no chromium or chromedriver is on PATH"
        )
    return found


@contextmanager
def headless_chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium under Selenium, nothing downloaded (Selenium Manager stays off)."""
    browser, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root, where Chromium's sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-background-networking",
    ):
        options.add_argument(argument)
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
    try:
        yield chrome
    finally:
        chrome.quit()
