"""The console's browser tests' deployment, shared by the run: the run's Redis, two pods and
``adapter console`` as child processes under a key prefix of their own (each test uses topic
and group names of its own), and Playwright driving Debian's Chromium (/usr/bin/chromium,
installed by tools/bootstrap.sh; Playwright's own browser download is not used).

Without Chromium or Playwright the browser tests skip, except in CI (``CI=true``), where the
bootstrap installs them: there they fail."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.console import CHROMIUM, CHROMIUM_ARGS, Console
from tests.support.pods import RF1, Pod, start_all

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# Where the screenshots also go when set (docs/console to refresh the documentation's).
SCREENSHOTS_ENV = "ADAPTER_CONSOLE_SCREENSHOTS"
PAGE_TIMEOUT_MS = 15_000
# The console's sampling of rates and stored records: often, so a page shows a new count soon.
SAMPLE_INTERVAL_S = 1.0


def _missing_browser(reason: str) -> None:
    """Skip, or fail in CI: there the bootstrap installed the browser, so its absence is a
    broken set-up, not a machine without it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI installs it: tools/bootstrap.sh test)")
    pytest.skip(f"{reason}: run tools/bootstrap.sh test")


@pytest.fixture(scope="session")
def console_prefix() -> str:
    """The deployment's key prefix: the console shows only what these tests wrote."""
    return f"console-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def console_pods(redis_url: str, console_prefix: str) -> Iterator[tuple[Pod, Pod]]:
    """Two pods (single-replica topics: records are visible at once)."""
    pods = [Pod(redis_url, *RF1, "--key-prefix", console_prefix) for _ in range(2)]
    start_all(pods)
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()


@pytest.fixture(scope="session")
def console(
    redis_url: str, console_prefix: str, console_pods: tuple[Pod, Pod]
) -> Iterator[Console]:
    """``adapter console`` on a free port, reading the pods' Redis and prefix."""
    served = Console(
        redis_url, "--key-prefix", console_prefix, "--sample-interval-s", str(SAMPLE_INTERVAL_S)
    ).start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium under Playwright, headless; closed after the module (Playwright's
    synchronous API holds an event loop in this thread while it runs: tests of other
    modules that run one, such as the command line's, must come after it)."""
    if not CHROMIUM.exists():
        _missing_browser(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing_browser("Playwright is not installed (the project's test extra)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page of a fresh browser context (no cookies shared between tests); a script error
    on any page it showed fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    opened = context.new_page()
    script_errors: list[str] = []
    opened.on("pageerror", lambda error: script_errors.append(f"{opened.url}: {error}"))
    yield opened
    context.close()
    assert script_errors == [], script_errors


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture
def screenshot(screenshot_dir: Path) -> Callable[[Page, str], Path]:
    """``screenshot(page, name)``: the whole page as ``<name>.png`` in the run's temporary
    folder (a test artifact), and in $ADAPTER_CONSOLE_SCREENSHOTS too when set."""

    def take(page: Page, name: str) -> Path:
        path = screenshot_dir / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        also = os.environ.get(SCREENSHOTS_ENV)
        if also:
            Path(also).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(also) / path.name)
        return path

    return take
