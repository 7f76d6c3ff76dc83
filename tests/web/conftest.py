"""A real server and Debian's Chromium (driven by Playwright) for the web page's tests.

The browser is the system's ``/usr/bin/chromium`` (CI installs it; see ``.ci/run``), never a
downloaded one: without it the browser tests are skipped, saying so. The server is a real
``uvicorn`` over a temporary SQLite database (``tests.api.servers.Server``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from tests.api.servers import Server

CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "web-test-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("web-server")
    with Server(f"sqlite:///{data / 'commest.sqlite3'}", data, token=TOKEN) as running:
        yield running


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Page]:
    """A fresh page (its own session storage) at 1400×1000; an uncaught script error, a
    Content-Security-Policy violation or a request to another host (the page works offline)
    fails the test."""
    context = browser.new_context(
        viewport={"width": 1400, "height": 1000}, base_url=server.base_url
    )
    context.set_default_timeout(30_000)  # a liveness bound on a loaded machine, not a target
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on(
        "console",
        lambda message: (
            errors.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    origin = urlsplit(server.base_url).netloc
    opened.on(
        "request",
        lambda request: (
            errors.append(f"remote request: {request.url}")
            if urlsplit(request.url).scheme in ("http", "https")
            and urlsplit(request.url).netloc != origin
            else None
        ),
    )
    yield opened
    context.close()
    assert not errors, f"uncaught errors, CSP violations or remote requests: {errors}"


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go (printed, to look at them after a run)."""
    folder = tmp_path_factory.mktemp("web-screenshots")
    print(f"screenshots: {folder}")
    return folder
