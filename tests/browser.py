"""Debian's chromium driven by Playwright, for the console's browser tests.

Playwright's own browser download cannot work on these machines (no network beyond
the package registries), so it is pointed at the system's chromium, which
scripts/bootstrap.sh installs. The flags are those that keep chromium from calling
home (its background connections would be refused here) and let it run as root.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Playwright, sync_playwright

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium not found: scripts/bootstrap.sh installs Debian's chromium")
    return found


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=chromium_path(), args=FLAGS)
    yield b
    b.close()


@dataclass
class Watched:
    """A page and what it did that a test may want to be sure did not happen."""

    page: Page
    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def csp_violations(self) -> list[str]:
        return [m for m in self.console_errors if "Content Security Policy" in m]


def watch(page: Page) -> Watched:
    watched = Watched(page)

    def on_dialog(dialog: Dialog) -> None:
        watched.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.console_errors.append(message.text)

    page.on("dialog", on_dialog)
    page.on("console", on_console)
    return watched


@pytest.fixture
def new_page(browser: Browser) -> Iterator[Callable[[], Watched]]:
    """A fresh browser context (its own cookies) and page per call, watched."""
    contexts = []

    def make() -> Watched:
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        context.set_default_timeout(30_000)
        contexts.append(context)
        return watch(context.new_page())

    yield make
    for c in contexts:
        c.close()
