"""Debian's Chromium, headless, driven by Playwright, for the console's tests;
and the screenshots those tests keep."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import REPO

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Debian's Chromium; a missing one fails the test on CI and skips it elsewhere."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("chromium is missing: .ci/run installs Debian's chromium package")
    pytest.skip("Debian's chromium is not installed (make chromium, or apt-get install chromium)")


@contextmanager
def launched_chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's ``Browser``), closed on leaving."""
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=path, args=FLAGS)
        yield launched
        launched.close()


def keep_screenshot(path: Path) -> None:
    """With ``UPDATE_CONSOLE_SCREENSHOTS=1``, copies a screenshot to ``docs/img/``."""
    if os.environ.get("UPDATE_CONSOLE_SCREENSHOTS") == "1":
        shutil.copy(path, REPO / "docs" / "img" / path.name)
