"""The ASGI app of ``wgstore serve``: pages, ``/api/...``, ``/api/stream`` (server-sent events)
and ``/metrics``, over one read-only store and one follower of its log.

Pages are a small HTML shell each and one JS file (``static/live.js``) that fetches the page's
JSON and draws it with DOM text nodes, so every string from the log is shown as text, never
parsed as HTML. The JSON endpoints run in Starlette's thread pool (the store is synchronous).
"""

from __future__ import annotations

import asyncio
import html
import json
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from wgstore.events import EventStore, InvalidArgumentError, StoreUnavailableError
from wgstore.events.errors import EventStoreError
from wgstore.projections import ProjectionError, StreamNotFoundError
from wgstore.projections.text import json_default
from wgstore.serve import views
from wgstore.serve.cache import AnswerCache
from wgstore.serve.follower import Follower
from wgstore.serve.interest import Interest
from wgstore.serve.metrics import metrics_registry

__all__ = ["TOKEN_COOKIE", "TokenGuard", "create_app"]

TOKEN_COOKIE = "wgstore_serve_token"
PING_S = 15


def _encode(content: Any) -> bytes:
    return json.dumps(content, default=json_default, ensure_ascii=False).encode()


def _guarded(
    handler: Callable[[Request], Any], answers: AnswerCache, head: Callable[[], int]
) -> Callable[[Request], Any]:
    """Answer with ``handler``'s data as JSON, shared through ``answers`` at the same log head;
    turn the library's errors into JSON answers: 400 bad input, 404 not found, 422 a stream
    that cannot be folded, 503 the store is unavailable.

    A request with ``?head=N`` (a live page, after an ``append`` message at ``N``) is answered
    on the event loop from a kept answer at ``N`` or later, or waits for the one being computed
    for it: after an append the open pages of a run cost one computation and no thread each."""
    flights: dict[str, tuple[int, asyncio.Future[tuple[int, bytes]]]] = {}

    def compute(request: Request, key: str) -> tuple[int, bytes]:
        try:
            return 200, answers.get(key, head(), lambda: _encode(handler(request)))
        except InvalidArgumentError as error:
            missing = str(error).startswith(("no run id starts with", "no worker group id starts"))
            return (404 if missing else 400), _message(str(error))
        except StreamNotFoundError as error:
            return 404, _message(str(error))
        except ProjectionError as error:
            return 422, _message(str(error))
        except StoreUnavailableError as error:
            return 503, _message(f"the store is unavailable: {error}")
        except EventStoreError as error:
            return 503, _message(f"the store failed: {error}")
        except Exception as error:
            if type(error).__module__.startswith(("sqlalchemy", "psycopg", "sqlite3")):
                return 503, _message(f"the store is unavailable: {str(error).splitlines()[0]}")
            raise

    async def endpoint(request: Request) -> Response:
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "head"]
        key = f"{request.url.path}?{urlencode(kept)}"
        seen = request.query_params.get("head", "")
        if seen.isdigit():
            kept_body = answers.at_least(key, int(seen))
            if kept_body is not None:
                return Response(kept_body, media_type="application/json")
            flight = flights.get(key)
            if flight is not None and flight[0] >= int(seen):
                status, body = await asyncio.shield(flight[1])
                return Response(body, status_code=status, media_type="application/json")
        started = request.app.state.follower.head if hasattr(request.app.state, "follower") else 0
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        flights[key] = (started, future)
        try:
            status, body = await run_in_threadpool(compute, request, key)
            future.set_result((status, body))
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: the waiters, if any, raise it too
            raise
        finally:
            if flights.get(key, (0, None))[1] is future:
                del flights[key]
        return Response(body, status_code=status, media_type="application/json")

    endpoint.__name__ = handler.__name__
    return endpoint


def _message(text: str) -> bytes:
    return _encode({"error": text})


def _int(request: Request, name: str, default: int | None) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not a whole number") from None


class TokenGuard:
    """ASGI middleware: every request needs the token, as ``Authorization: Bearer <token>``, a
    ``?token=`` query parameter (a browser's first visit; it then gets an HttpOnly cookie) or
    that cookie. Compared in constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        header = request.headers.get("authorization", "")
        given = [
            header[7:] if header.lower().startswith("bearer ") else "",
            request.cookies.get(TOKEN_COOKIE, ""),
            request.query_params.get("token", ""),
        ]
        if not any(g and secrets.compare_digest(g.encode(), self.token) for g in given):
            response: Response = Response(
                "wgstore serve: give the token (?token=..., or Authorization: Bearer ...)\n",
                status_code=401,
                media_type="text/plain",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        if request.query_params.get("token"):
            token = self.token.decode()
            if request.method == "GET" and not request.url.path.startswith("/api/"):
                # a page opened with ?token=: keep the token out of the address bar and history
                kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = request.url.path + (f"?{urlencode(kept)}" if kept else "")
                redirect = RedirectResponse(target, status_code=303)
                redirect.set_cookie(TOKEN_COOKIE, token, path="/", httponly=True, samesite="strict")
                await redirect(scope, receive, send)
                return

            async def send_with_cookie(message: Any) -> None:
                if message["type"] == "http.response.start":
                    cookie = f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
                    message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
                await send(message)

            await self.app(scope, receive, send_with_cookie)
            return
        await self.app(scope, receive, send)


_STATIC = resources.files("wgstore.serve") / "static"


def _asset(name: str) -> str:
    return (_STATIC / name).read_text(encoding="utf-8")


def _page(kind: str, title: str, ident: str = "") -> HTMLResponse:
    shell = _asset("page.html")
    filled = (
        shell.replace("{{kind}}", html.escape(kind, quote=True))
        .replace("{{id}}", html.escape(ident, quote=True))
        .replace("{{title}}", html.escape(title))
        .replace("{{css}}", _asset("live.css"))
    )
    return HTMLResponse(
        filled,
        headers={
            "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
        },
    )


def create_app(
    url: str,
    *,
    token: str | None = None,
    store: EventStore | None = None,
    follower_wait_s: float = 1.0,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The ``wgstore serve`` app for the store at ``url`` (opened read-only when it starts).

    Args:
        url: the store's URL.
        token: when given, every request must carry it (:class:`TokenGuard`).
        store: an already open store to serve instead of opening ``url`` (it is not closed).
        follower_wait_s: how long the follower blocks per wait (it also wakes on appends).
        allowed_hosts: answer only requests whose ``Host`` is one of these (``wgstore serve`` on
            a loopback address allows only loopback names: a web page cannot reach the server
            through a DNS name rebound to 127.0.0.1).
    """
    state: dict[str, Any] = {}
    answers = AnswerCache()

    def head() -> int:  # the log's head now (one index lookup), so no answer is stale
        return int(current().head())

    def current() -> EventStore:
        opened: EventStore = state["store"]
        return opened

    @asynccontextmanager
    async def lifespan(started: Starlette) -> AsyncIterator[None]:
        own = store is None
        state["store"] = EventStore.open(url, read_only=True, migrate=False) if own else store
        follower = Follower(current(), wait_s=follower_wait_s)
        state["follower"] = follower
        started.state.follower = follower
        started.state.answers = answers
        follower.start()
        state["registry"] = metrics_registry(current(), follower)
        try:
            yield
        finally:
            follower.stop()
            if own:
                current().close()

    def api_runs(request: Request) -> Any:
        params = request.query_params
        run_filter = views.RunFilter.parse(
            statuses=params.getlist("status"),
            name=params.get("name"),
            source=params.get("source"),
            orphaned=params.get("orphaned", "") in ("1", "true", "yes"),
            since=params.get("since"),
        )
        return views.run_list(
            current(),
            run_filter,
            limit=_int(request, "limit", 100) or 100,
            offset=_int(request, "offset", 0) or 0,
        )

    def api_run(request: Request) -> Any:
        return views.run_page(current(), request.path_params["run"])

    def api_group(request: Request) -> Any:
        return views.group_page(current(), request.path_params["group"])

    def api_events(request: Request) -> Any:
        params = request.query_params
        return views.event_list(
            current(),
            after=_int(request, "after", None),
            stream=params.get("stream") or None,
            group=params.get("group") or None,
            run=params.get("run") or None,
            types=params.getlist("type"),
            limit=_int(request, "limit", 200) or 200,
        )

    async def api_stream(request: Request) -> Response:
        try:
            interest = Interest.parse(request.query_params.multi_items())
        except InvalidArgumentError as error:
            return Response(_message(str(error)), status_code=400, media_type="application/json")
        follower: Follower = state["follower"]

        async def messages() -> AsyncIterator[dict[str, str]]:
            queue = follower.subscribe(interest)  # its first message: the status as of now
            try:
                while True:
                    message = await queue.get()
                    if message["kind"] == "closing":
                        return
                    yield {"event": message["kind"], "data": message.json}
            finally:
                follower.unsubscribe(queue)

        return EventSourceResponse(messages(), ping=PING_S)

    def metrics(_request: Request) -> Response:
        return Response(generate_latest(state["registry"]), media_type=CONTENT_TYPE_LATEST)

    async def runs_page(_request: Request) -> Response:
        return _page("runs", "runs")

    async def run_page(request: Request) -> Response:
        run = request.path_params["run"]
        return _page("run", f"run {run}", run)

    async def group_page(request: Request) -> Response:
        group = request.path_params["group"]
        return _page("group", f"group {group}", group)

    async def log_page(_request: Request) -> Response:
        return _page("log", "log")

    async def script(_request: Request) -> Response:
        return Response(
            _asset("live.js"),
            media_type="text/javascript",
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
        )

    routes = [
        Route("/", runs_page),
        Route("/runs/{run:path}", run_page),
        Route("/groups/{group:path}", group_page),
        Route("/log", log_page),
        Route("/static/live.js", script),
        Route("/api/runs", _guarded(api_runs, answers, head)),
        Route("/api/runs/{run:path}", _guarded(api_run, answers, head)),
        Route("/api/groups/{group:path}", _guarded(api_group, answers, head)),
        Route("/api/events", _guarded(api_events, answers, head)),
        Route("/api/stream", api_stream),
        Route("/metrics", metrics),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    if token:
        app.add_middleware(TokenGuard, token=token)
    if allowed_hosts:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return app
