"""A database that goes away: the open page shows a banner, the API answers 503, and both recover
when it is back. PostgreSQL reached through a TCP relay the test cuts and restores (the shared
server itself is never stopped)."""

from __future__ import annotations

from typing import Any

import pytest
from serve_scenarios import live_run, new_run
from serve_support import live_server, wait_for

from tests.relay import Relay
from wgstore.events import EventStore
from wgstore.serve.app import create_app

WAIT_MS = 60_000


def test_the_page_shows_a_banner_while_the_database_is_away_and_recovers(
    relayed: tuple[str, Relay], pg_url: str, tmp_path: Any
) -> None:
    from test_browser import CHROMIUM_FLAGS, chromium_binary

    sync_api = pytest.importorskip("playwright.sync_api")
    relay_url, relay = relayed
    with EventStore.open(pg_url) as writer:
        live_run(writer, "run-before")
        app = create_app(relay_url, follower_wait_s=0.5)
        with live_server(app) as base, sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_binary(), args=CHROMIUM_FLAGS, headless=True
            )
            try:
                page = browser.new_page()
                page.goto(base + "/")
                page.wait_for_selector("a[href='/runs/run-before']", timeout=WAIT_MS)
                banner = page.locator("#banner")
                assert banner.is_hidden()
                relay.cut()
                banner.wait_for(state="visible", timeout=WAIT_MS)
                assert "The store is unavailable" in banner.inner_text()
                page.screenshot(path=str(tmp_path / "outage.png"), full_page=True)
                import httpx

                down = httpx.get(base + "/api/runs", timeout=60)
                assert down.status_code == 503
                assert "unavailable" in down.json()["error"]
                new_run(writer, "run-during", "appended-while-away")  # the writer is not cut
                relay.restore()
                banner.wait_for(state="hidden", timeout=WAIT_MS)
                page.wait_for_selector("a[href='/runs/run-during']", timeout=WAIT_MS)
                wait_for(
                    lambda: httpx.get(base + "/api/runs", timeout=60).status_code == 200,
                    "the API answering again",
                )
                page.screenshot(path=str(tmp_path / "recovered.png"), full_page=True)
            finally:
                browser.close()
