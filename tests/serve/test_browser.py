"""``wgstore serve``'s pages in a real browser: Debian's Chromium, headless, driven by Playwright
(its Python package, pointed at /usr/bin/chromium: no browser download).

Each page is served by a real uvicorn over a real store (SQLite and Postgres); the tests append
to the store while the page is open and wait, with a deadline, for the page to change without a
reload. What the pages' streams watch is read from the server's follower (one stream per browser
while it has SharedWorker). A screenshot of each page is kept in the test's tmp dir. Without Chromium the tests are
skipped on a developer machine and fail when ``CI=true`` (``make system-deps`` installs it).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_scenarios import (
    ERROR_MESSAGE,
    attempt,
    errored_run,
    live_run,
    new_run,
    ray_train_run,
    report,
    restarting,
    resumed_run,
    wgstore_run,
)
from serve_support import live_server, wait_for

from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.serve.app import create_app
from wgstore.serve.interest import Interest

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright")

TOKEN = "browser-test-token-0123456789abcdef"
XSS_NAME = "<script>alert(1)</script>"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 30_000
"""How long a page may take to show an append (generous under load; the goal is < 1 s)."""


def chromium_binary() -> str:
    """Debian's Chromium, or skip (developer machine) / fail (CI) when it is missing."""
    found = next(
        (
            p
            for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
            if p and os.access(p, os.X_OK)
        ),
        None,
    )
    if found is None:
        reason = (
            "Debian's chromium is not installed (make system-deps, or apt-get install chromium)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}. CI must run the browser tests.", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    binary = chromium_binary()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=binary, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    opened.dialogs = dialogs
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def served(writer: Any, store_url: str) -> Iterator[dict[str, Any]]:
    """A live run named like a script, an errored run, and the server over them."""
    live_group = live_run(writer, "run-live1", name=XSS_NAME)
    errored_run(writer, "run-err22")
    app = create_app(store_url, follower_wait_s=0.5)
    with live_server(app) as base:
        yield {"base": base, "live_group": live_group, "url": store_url, "app": app}


def _mark(page: Any) -> None:
    """Tag the window: a reload would lose the tag."""
    page.evaluate("window.__notReloaded = true")


def _not_reloaded(page: Any) -> bool:
    return bool(page.evaluate("window.__notReloaded === true"))


def test_the_runs_page_lists_a_run_started_while_it_is_open(
    page: Any, served: dict[str, Any], writer: Any, tmp_path: Path
) -> None:
    page.goto(served["base"] + "/")
    page.wait_for_selector("text=run-err22", timeout=WAIT_MS)
    _mark(page)
    new_run(writer, "run-new99", "started-during-the-test")
    page.wait_for_selector("a[href='/runs/run-new99']", timeout=WAIT_MS)
    assert page.locator("text=started-during-the-test").count() == 1
    assert _not_reloaded(page)
    page.screenshot(path=str(tmp_path / "runs.png"), full_page=True)


def test_a_report_changes_the_run_pages_chart_and_table_without_a_reload(
    page: Any, served: dict[str, Any], writer: Any, tmp_path: Path
) -> None:
    page.goto(served["base"] + "/runs/run-li")  # a prefix, as in the CLI
    chart = page.locator("svg[data-metric='loss']")
    chart.wait_for(timeout=WAIT_MS)
    assert chart.get_attribute("data-points") == "4"  # 2 ranks x 2 steps
    _mark(page)
    appended = time.perf_counter()
    report(writer, served["live_group"], 0, 3, loss=0.25, acc=0.3)
    page.wait_for_selector("svg[data-metric='loss'][data-points='5']", timeout=WAIT_MS)
    seen_ms = (time.perf_counter() - appended) * 1000
    page.wait_for_function(
        "() => [...document.querySelectorAll('main td')].some(td => td.textContent.includes('loss=0.25'))",
        timeout=WAIT_MS,
    )
    assert _not_reloaded(page)
    print(f"append -> chart redrawn: {seen_ms:.0f} ms")
    stream = group_stream(served["live_group"])
    writer.append(stream, [WorkerReported(world_rank=0, index=4, metrics={}, checkpoint="ck-4")])
    page.wait_for_selector(
        "text=ck-4 (the latest some ranks reported; not committed)", timeout=WAIT_MS
    )
    writer.append(stream, [WorkerReported(world_rank=1, index=4, metrics={}, checkpoint="ck-4")])
    page.wait_for_selector("text=ck-4 (committed by every rank", timeout=WAIT_MS)
    assert page.locator("text=not committed").count() == 0
    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)


def test_a_group_page_shows_a_workers_error_with_its_traceback(
    page: Any, served: dict[str, Any], tmp_path: Path
) -> None:
    page.goto(served["base"] + "/groups/run-err2")
    page.wait_for_selector("h2:has-text('Errors')", timeout=WAIT_MS)
    errors = page.locator("div.error").inner_text()
    assert f"rank 1: RuntimeError: {ERROR_MESSAGE}" in errors  # the <b> shown as text
    assert "Traceback" in errors
    assert page.locator("main b").count() == 0
    page.screenshot(path=str(tmp_path / "group.png"), full_page=True)


def test_a_run_named_like_a_script_shows_as_text(
    page: Any, served: dict[str, Any], tmp_path: Path
) -> None:
    for path in ("/", "/runs/run-live1", "/log"):
        page.goto(served["base"] + path)
        page.wait_for_function(
            f"() => document.querySelector('main').textContent.includes({XSS_NAME!r})",
            timeout=WAIT_MS,
        )
        assert page.locator("main script").count() == 0
        assert page.evaluate("document.scripts.length") == 1  # live.js, nothing else
    assert page.dialogs == []
    page.screenshot(path=str(tmp_path / "log.png"), full_page=True)


def test_the_pages_need_the_token_and_work_live_with_it(
    page: Any, writer: Any, store_url: str, tmp_path: Path
) -> None:
    live_run(writer, "run-tok1")
    with live_server(create_app(store_url, token=TOKEN, follower_wait_s=0.5)) as base:
        refused = page.goto(base + "/")
        assert refused.status == 401
        assert "give the token" in page.content()
        allowed = page.goto(base + f"/?token={TOKEN}")
        assert allowed.status == 200
        page.wait_for_selector("a[href='/runs/run-tok1']", timeout=WAIT_MS)
        new_run(writer, "run-tok2", "after-the-token")  # the live stream carries the cookie
        page.wait_for_selector("a[href='/runs/run-tok2']", timeout=WAIT_MS)
        page.goto(base + "/runs/run-tok1")  # a link followed without the token in the URL
        page.wait_for_selector("svg[data-metric='loss']", timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / "token.png"), full_page=True)


def test_a_run_page_redraws_for_its_own_streams_only(
    page: Any, served: dict[str, Any], writer: Any
) -> None:
    page.goto(served["base"] + "/runs/run-live1")
    page.wait_for_selector("svg[data-metric='loss'][data-points='4']", timeout=WAIT_MS)
    # drawn twice on opening: once as it loads, once when the stream's first status arrives
    page.wait_for_selector("body[data-rendered='2']", timeout=WAIT_MS)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    report(writer, "run-err22-g1", 0, 2, loss=0.4)  # another run's group
    head = writer.head()
    page.wait_for_selector(f"#live:has-text('head {head}')", timeout=WAIT_MS)
    assert [url for url in asked if "/api/" in url] == []
    report(writer, served["live_group"], 1, 3, loss=0.3)
    head = writer.head()
    page.wait_for_selector("svg[data-metric='loss'][data-points='5']", timeout=WAIT_MS)
    # the page says the head it redraws for: any answer the server keeps at that head serves it
    assert [url for url in asked if "/api/" in url] == [
        f"{served['base']}/api/runs/run-live1?head={head}"
    ]
    assert page.get_attribute("body", "data-rendered") == "3"


def test_more_tabs_than_the_browsers_connections_per_server_all_stay_live(
    browser: Any, served: dict[str, Any], writer: Any
) -> None:
    """Chromium opens at most 6 HTTP/1.1 connections to one server: the tabs share one stream."""
    context = browser.new_context()
    try:
        tabs = []
        for _ in range(10):
            tab = context.new_page()
            tab.goto(served["base"] + "/runs/run-live1")
            tabs.append(tab)
        for tab in tabs:
            tab.wait_for_selector("svg[data-metric='loss'][data-points='4']", timeout=WAIT_MS)
        report(writer, served["live_group"], 0, 3, loss=0.2)
        for tab in tabs:
            tab.wait_for_selector("svg[data-metric='loss'][data-points='5']", timeout=WAIT_MS)
    finally:
        context.close()


def test_the_runs_page_filters_by_state_and_name_from_its_form(
    page: Any, served: dict[str, Any]
) -> None:
    page.goto(served["base"] + "/")
    page.wait_for_selector("a[href='/runs/run-err22']", timeout=WAIT_MS)
    page.fill("input[name='name']", "ERRORED")
    page.select_option("select[name='status']", "RUNNING")
    page.click("button[type='submit']")
    page.wait_for_url("**/?status=RUNNING*name=ERRORED*", timeout=WAIT_MS)
    page.wait_for_selector(".pager:has-text(' of 1')", timeout=WAIT_MS)
    assert page.locator("main a[href^='/runs/']").all_inner_texts() == ["run-err22"]
    page.select_option("select[name='status']", "FINISHED")
    page.click("button[type='submit']")
    page.wait_for_selector("text=no runs match", timeout=WAIT_MS)


def _watched(app: Any) -> list[Interest]:
    """What each open stream of the server watches."""
    return sorted(app.state.follower.interests(), key=repr)


def _watch(*values: str) -> list[Interest]:
    return [Interest.of(values)]


def _has_text(page: Any, text: str) -> None:
    page.wait_for_function(
        f"() => document.querySelector('main').textContent.includes({text!r})", timeout=WAIT_MS
    )


@pytest.mark.parametrize("source", ["wgstore", "ray_train"])
def test_a_run_page_shows_a_new_attempt_of_its_run_as_it_starts(
    page: Any, writer: Any, store_url: str, source: str
) -> None:
    """A recorded Ray Train attempt starts on its group's stream, before the run's stream names
    it: the run page learns of it from that ``WorkerGroupStartRequested`` (it names the run)."""
    run = (wgstore_run if source == "wgstore" else ray_train_run)(writer, "run-att1")
    app = create_app(store_url, follower_wait_s=0.5)
    with live_server(app) as base:
        page.goto(base + "/runs/run-att1")
        page.wait_for_selector("svg[data-metric='loss'][data-points='2']", timeout=WAIT_MS)
        wait_for(lambda: _watched(app) == _watch("run:run-att1", "group:run-att1-g1"), "watched")
        _mark(page)
        group = restarting(run, source)
        _has_text(page, "RESTARTING → " + ("RESCHEDULING" if source == "wgstore" else "SCHEDULING"))
        appended = time.perf_counter()
        attempt(writer, "run-att1", group, 2)  # its start, then at once its first reports
        page.wait_for_selector(f"main a[href='/groups/{group}']", timeout=WAIT_MS)
        # the page watches the new group now, and missed none of its reports meanwhile
        page.wait_for_selector("svg[data-metric='loss'][data-points='4']", timeout=WAIT_MS)
        seen_ms = (time.perf_counter() - appended) * 1000
        _has_text(page, "attempt 2 rank 1")
        wait_for(
            lambda: _watched(app) == _watch("run:run-att1", "group:run-att1-g1", f"group:{group}"),
            "the new group watched",
        )
        report(writer, group, 0, 2, loss=0.2)
        page.wait_for_selector("svg[data-metric='loss'][data-points='5']", timeout=WAIT_MS)
        assert _not_reloaded(page)
        print(f"{source}: a new attempt's stream appended -> its reports charted: {seen_ms:.0f} ms")


def _api_requests(tab: Any) -> list[str]:
    """The /api/ requests ``tab`` makes from now on (the list grows)."""
    asked: list[str] = []
    tab.on("request", lambda request: asked.append(request.url) if "/api/" in request.url else None)
    return asked


def _redrawn_for(asked: list[str], head: int) -> list[str]:
    """The requests of a page redrawing for the message at ``head`` (a page asks for what it
    shows at the head of the message it redraws for)."""
    return [url for url in asked if url.endswith(f"?head={head}")]


def _head_shown(tab: Any, head: int) -> None:
    tab.wait_for_selector(f"#live:has-text('head {head}')", timeout=WAIT_MS)


def test_two_tabs_watching_different_things_share_one_stream_and_each_redraws_for_its_own(
    browser: Any, served: dict[str, Any], writer: Any
) -> None:
    app, base = served["app"], served["base"]
    context = browser.new_context()
    try:
        run_tab, group_tab = context.new_page(), context.new_page()
        run_asked, group_asked = _api_requests(run_tab), _api_requests(group_tab)
        run_tab.goto(base + "/runs/run-live1")
        group_tab.goto(base + "/groups/run-err22-g1")
        run_tab.wait_for_selector("svg[data-metric='loss'][data-points='4']", timeout=WAIT_MS)
        group_tab.wait_for_selector("h2:has-text('Errors')", timeout=WAIT_MS)
        both = _watch("run:run-live1", "group:run-live1-g1", "group:run-err22-g1")
        wait_for(lambda: _watched(app) == both, "one stream watching what both tabs watch")

        report(writer, served["live_group"], 0, 3, loss=0.25)
        head = writer.head()
        run_tab.wait_for_selector("svg[data-metric='loss'][data-points='5']", timeout=WAIT_MS)
        _head_shown(group_tab, head)  # it had the message (the stream is shared), no redraw
        assert _redrawn_for(run_asked, head) == [f"{base}/api/runs/run-live1?head={head}"]
        assert _redrawn_for(group_asked, head) == []

        report(writer, "run-err22-g1", 0, 2, loss=0.4)
        head = writer.head()
        group_tab.wait_for_function(
            "() => [...document.querySelectorAll('dt')].some("
            "dt => dt.textContent === 'reports' && dt.nextSibling.textContent === '2')",
            timeout=WAIT_MS,
        )
        _head_shown(run_tab, head)
        assert _redrawn_for(group_asked, head) == [f"{base}/api/groups/run-err22-g1?head={head}"]
        assert _redrawn_for(run_asked, head) == []

        group_tab.close()  # the stream is opened again for what the run tab watches alone
        alone = _watch("run:run-live1", "group:run-live1-g1")
        wait_for(lambda: _watched(app) == alone, "the stream watching the run tab's alone")
        report(writer, served["live_group"], 1, 3, loss=0.3)
        run_tab.wait_for_selector("svg[data-metric='loss'][data-points='6']", timeout=WAIT_MS)
    finally:
        context.close()
    wait_for(lambda: _watched(app) == [], "no stream once the browser closed its tabs")


def test_without_shared_workers_a_page_opens_its_own_stream_for_what_it_shows(
    page: Any, writer: Any, store_url: str
) -> None:
    run = ray_train_run(writer, "run-own1")
    app = create_app(store_url, follower_wait_s=0.5)
    page.add_init_script("delete window.SharedWorker")
    with live_server(app) as base:
        page.goto(base + "/runs/run-own1")
        page.wait_for_selector("svg[data-metric='loss'][data-points='2']", timeout=WAIT_MS)
        assert page.evaluate("typeof window.SharedWorker") == "undefined"
        wait_for(lambda: _watched(app) == _watch("run:run-own1", "group:run-own1-g1"), "watched")
        _mark(page)
        group = restarting(run, "ray_train")
        _has_text(page, "RESTARTING → SCHEDULING")
        attempt(writer, "run-own1", group, 2)
        page.wait_for_selector("svg[data-metric='loss'][data-points='4']", timeout=WAIT_MS)
        mine = _watch("run:run-own1", "group:run-own1-g1", f"group:{group}")
        wait_for(lambda: _watched(app) == mine, "the page's own stream opened again")
        report(writer, group, 1, 2, loss=0.2)
        page.wait_for_selector("svg[data-metric='loss'][data-points='5']", timeout=WAIT_MS)
        assert _not_reloaded(page)


def _path_xs(page: Any, attempt: int) -> list[float]:
    """The x of each point of the loss chart's line of ``attempt`` (rank 0), as drawn."""
    d = page.get_attribute(f"svg[data-metric='loss'] path[data-attempt='{attempt}']", "d")
    return [float(part.split()[0]) for part in d.replace("M", "L").split("L") if part.strip()]


@pytest.mark.parametrize("with_step", [True, False], ids=["step", "no-step"])
def test_a_resumed_runs_chart_draws_each_attempt_where_it_reported(
    page: Any, writer: Any, store_url: str, with_step: bool, tmp_path: Path
) -> None:
    """Attempt 2 reports steps 3-6 from report index 0 after a resume from step 2: its line
    starts at attempt 1's step 3 (with a step metric) or right after attempt 1's last report
    (without), never at x = 0 on top of attempt 1 (issue 41, item 11)."""
    resumed_run(writer, "run-res9", with_step=with_step)
    with live_server(create_app(store_url, follower_wait_s=0.5)) as base:
        page.goto(base + "/runs/run-res9")
        page.wait_for_selector("svg[data-metric='loss'][data-points='8']", timeout=WAIT_MS)
        first, second = _path_xs(page, 1), _path_xs(page, 2)
        axis = page.get_attribute("svg[data-metric='loss']", "data-x")
        page.screenshot(path=str(tmp_path / "resumed.png"), full_page=True)
    assert len(first) == len(second) == 4
    assert first == sorted(first) and second == sorted(second)
    if with_step:  # steps 1-4 and 3-6 on one axis: attempt 2 starts at attempt 1's step 3
        assert second[0] == pytest.approx(first[2], abs=0.1)
        assert second[1] == pytest.approx(first[3], abs=0.1)
    else:  # the run-wide report index: attempt 2 continues after attempt 1
        assert second[0] > first[-1]
        gap = first[1] - first[0]
        assert second[0] - first[-1] == pytest.approx(gap, abs=0.1)
    assert axis == ("step" if with_step else "report")
    assert page.locator("svg[data-metric='loss'] text", has_text=f"{axis} ").count() == 2


def test_an_elastic_runs_page_draws_its_size_over_time(
    page: Any, writer: Any, store_url: str
) -> None:
    """Issue 40: a step line of the workers of each attempt beside the metrics, the sizes in
    the attempts table and every resize, with its reason, in the timeline."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
    import run_scenarios

    run_scenarios.elastic_resized(writer)
    with live_server(create_app(store_url, follower_wait_s=0.5)) as base:
        page.goto(base + "/runs/ela")
        chart = page.wait_for_selector("svg[data-metric='workers']", timeout=WAIT_MS)
        assert chart.get_attribute("data-sizes") == "2,4"
        path = chart.query_selector("path").get_attribute("d")
        assert path.count("L") == 3  # two steps: up, along, along
        text = page.inner_text("body")
        assert "2..4 \N{MULTIPLICATION SIGN} " in text and "(now 4)" in text
        assert "2 → 4 (grew)" in text and "more resources available" in text


def test_an_archived_runs_page_says_it_is_archived_and_how_to_restore_it(
    page: Any, served: dict[str, Any], writer: Any, tmp_path: Path
) -> None:
    from datetime import UTC, datetime, timedelta

    from run_scenarios import finished_after_a_retry

    from wgstore.projections.archiving import archive_runs, plan_archive

    finished_after_a_retry(writer, "fin-arch")
    plan = plan_archive(writer, ended_before=datetime.now(UTC) + timedelta(days=1))
    archive_runs(writer, str(tmp_path / "archive"), plan)
    page.goto(served["base"] + "/runs/fin-arch")
    _has_text(page, "read from the archive's file")
    assert page.locator("text=wgstore restore fin-arch puts it back").count() == 1
    _has_text(page, "FINISHED")
    page.screenshot(path=str(tmp_path / "archived-run.png"), full_page=True)
