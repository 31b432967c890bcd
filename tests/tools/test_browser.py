"""course_embed.tools.browser: which browser drives the PDF and the site test, and the local server."""

import os
import urllib.request

import pytest

from course_embed.tools import browser


def _fake(path):
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_environment_variable_wins(tmp_path, monkeypatch):
    chosen = _fake(tmp_path / "my-chrome")
    monkeypatch.setenv(browser.ENV, str(chosen))
    assert browser.find_browser() == chosen
    monkeypatch.setenv(browser.ENV, str(tmp_path / "missing"))
    with pytest.raises(browser.BrowserNotFound, match=f"{browser.ENV}=.*missing is not a file"):
        browser.find_browser()


@pytest.mark.parametrize("name", ["chromium", "google-chrome"])
def test_chromium_or_chrome_is_found_on_path(tmp_path, monkeypatch, name):
    monkeypatch.delenv(browser.ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = _fake(tmp_path / name)
    assert browser.find_browser() == found


def test_no_browser_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.delenv(browser.ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(browser, "PLACES", ())
    with pytest.raises(browser.BrowserNotFound, match="no Chromium or Chrome found.*COURSE_EMBED_BROWSER"):
        browser.find_browser()


def test_serve_serves_a_folder_on_localhost(tmp_path):
    (tmp_path / "a.html").write_text("hello")
    with browser.serve(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        assert urllib.request.urlopen(url + "a.html").read() == b"hello"
    assert os.listdir(tmp_path) == ["a.html"]
