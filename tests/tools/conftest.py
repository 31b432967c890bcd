"""Fixtures of the browser tests: the built site served on localhost, the headless browser, axe-core."""

from pathlib import Path

import pytest

from course_embed.tools import assets, browser

from .grading_cases import built_exercises  # noqa: F401 (a session fixture, shared by the grading and exercise tests)

# axe-core, the accessibility engine, run on every page; fetched with npm and cached like the site's own packages.
AXE = assets.Package(
    "axe-core",
    "4.14.1",
    "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==",
    ("package.json", "axe.min.js"),
)


@pytest.fixture(scope="module")
def site_url(built_site):
    assert built_site.returncode == 0, built_site.log[-3000:]
    with browser.serve(built_site.html) as url:
        yield url


@pytest.fixture(scope="module")
def chromium():
    """The headless browser (launched once per module), or a failure that says how to get one."""
    from playwright.sync_api import sync_playwright

    try:
        executable = browser.find_browser()
    except browser.BrowserNotFound as error:
        pytest.fail(str(error))
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(executable), args=browser.ARGS)
        print(f"\nbrowser: {executable} ({launched.version})")
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def axe_js() -> Path:
    return assets.fetch(AXE) / "axe.min.js"
