"""The headless browser that prints the book to PDF and checks the built site, and a local server for the site.

Playwright drives a Chromium-family browser already on the machine (never ``playwright install``). ``find_browser``
takes, in order: ``$COURSE_EMBED_BROWSER`` (a path to a Chromium or Chrome binary); Chromium or Chrome under their
usual names on PATH (``chromium``, ``chromium-browser``, ``google-chrome``, ``google-chrome-stable``, ``chrome``); then
their usual install places on Linux, macOS and Windows.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

ENV = "COURSE_EMBED_BROWSER"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PLACES = (
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/snap/bin/chromium",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    r"C:\Program Files\Google\Chrome\Application\chrome.exe",
    r"C:\Program Files (x86)\Google\Chrome\Application\chrome.exe",
)
# Flags for a clean, quiet, offline browser; Playwright adds --headless and a fresh, empty profile.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


class BrowserNotFound(RuntimeError):
    """No Chromium or Chrome binary was found (or ``$COURSE_EMBED_BROWSER`` names a missing file)."""


def find_browser() -> Path:
    """The Chromium or Chrome binary to drive; raises ``BrowserNotFound`` saying where it looked and the fix."""
    if os.environ.get(ENV):
        path = Path(os.environ[ENV])
        if not path.is_file():
            raise BrowserNotFound(
                f"{ENV}={path} is not a file: set it to a Chromium or Chrome binary, e.g. "
                "/usr/bin/chromium or '/Applications/Google Chrome.app/Contents/MacOS/Google Chrome'"
            )
        return path
    for name in NAMES:
        if found := shutil.which(name):
            return Path(found)
    for place in PLACES:
        if Path(place).is_file():
            return Path(place)
    raise BrowserNotFound(
        f"no Chromium or Chrome found (looked for {', '.join(NAMES)} on PATH and in "
        f"{', '.join(PLACES)}): install one (Debian/Ubuntu: bash scripts/install.sh; macOS or "
        f"Windows: Google Chrome) or set {ENV} to its binary"
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 (a free port) while the block runs; yields its URL, ending in ``/``."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def offline(site_url: str, blocked: list[str]):
    """A Playwright route handler that lets requests to the site through, and blocks (and records) every other one."""

    def handle(route):
        if route.request.url.startswith(site_url):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    return handle
