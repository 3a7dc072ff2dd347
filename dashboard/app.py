"""The Dash app (multi-page) and its mount at "/" under the FastAPI app.

Every module of dashboard/pages is a page: it calls `dash.register_page(__name__, path=...,
name=<nav label>, order=<place in the navigation>, layout=...)`, and the navigation is built
from `dash.page_registry` in that order. A new page needs nothing here.

REST (/api/v1), /docs, /openapi.json and /healthz are FastAPI routes registered before the
mount, so they keep answering; every other path goes to Dash.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qsl, urlencode

import dash
import flask
from a2wsgi import WSGIMiddleware
from dash import Dash, Input, Output, dcc, html
from dash.exceptions import DependencyException
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from backend.config import Settings
from backend.db import Database
from dashboard import gate
from dashboard.context import DashboardContext, bind

PAGES_PACKAGE = "dashboard.pages"
# The filters that follow the reader from page to page.
# `owner` (a component's team) is the owners page's own filter and is not carried.
CARRIED = ("start", "end", "range", "team", "label", "bucket")

_lock = threading.RLock()
_app: Dash | None = None


class NavLink(NamedTuple):
    """One entry of the navigation: the page module's short name, its label and its path."""

    key: str
    label: str
    href: str


def import_pages() -> list[str]:
    """Import every module of dashboard/pages (each registers itself); their names, sorted."""
    package = importlib.import_module(PAGES_PACKAGE)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.ispkg)
    for name in names:
        importlib.import_module(f"{PAGES_PACKAGE}.{name}")
    return names


def nav() -> list[NavLink]:
    """The navigation: every registered page in its `order`, labelled with its `name`."""
    return [
        NavLink(page["module"].rsplit(".", 1)[-1], page["name"], page["path"])
        for page in dash.page_registry.values()  # Dash keeps it sorted by `order`
    ]


def _shell(links_to: list[NavLink]) -> html.Div:
    links = [dcc.Link(label, href=href, id=f"shell-nav-{key}") for key, label, href in links_to]
    links.append(html.A("API", href="/docs", id="shell-nav-api"))
    return html.Div(
        [
            dcc.Location(id="shell-url"),
            html.Header(
                [
                    dcc.Link("ETT%", href="/", className="ett-brand"),
                    html.Span("effective training time", className="ett-tagline"),
                    html.Nav(links, className="ett-nav"),
                ],
                className="ett-header",
            ),
            html.Main(dash.page_container, className="ett-main"),
        ]
    )


def _carry_filters(app: Dash, links_to: list[NavLink]) -> None:
    """Nav links keep the reader's date range, team, label and bucket."""

    @app.callback(
        [Output(f"shell-nav-{link.key}", "href") for link in links_to],
        Input("shell-url", "search"),
    )
    def carry(search: str | None) -> list[str]:
        query = {k: v for k, v in parse_qsl((search or "").lstrip("?")) if k in CARRIED and v}
        suffix = f"?{urlencode(query)}" if query else ""
        return [f"{link.href}{suffix}" for link in links_to]


def get_dash_app() -> Dash:
    """The process-wide Dash app (pages and callbacks register once per process)."""
    global _app
    with _lock:
        if _app is None:
            app = Dash(
                __name__,
                use_pages=True,
                pages_folder="",
                assets_folder=str(Path(__file__).parent / "assets"),
                title="ETT%",
                update_title=None,
                suppress_callback_exceptions=True,
                serve_locally=True,
            )
            # A path under /_dash-component-suites that names no file of a registered library
            # (`..`, an unknown package) is a 404, not a server error.
            app.server.register_error_handler(DependencyException, _not_a_component_file)
            app.server.before_request(_serve_plotly_bundle)
            # Published before the pages are imported: importing one re-enters here
            # (dashboard.pages builds the app first, since register_page needs it).
            _app = app
            try:
                import_pages()
                links_to = nav()
                app.layout = _shell(links_to)
                _carry_filters(app, links_to)
            except BaseException:
                _app = None
                raise
        return _app


# plotly.js as the pages use it: the "cartesian" partial bundle (scatter, bar, heatmap ...),
# a third of the full bundle that dash serves, which cost ~1 s of script evaluation per page.
PLOTLY_BUNDLE = Path(__file__).parent / "vendor" / "plotly-cartesian.min.js"
PLOTLY_PATH = "/_dash-component-suites/plotly/package_data/plotly.min.js"


def _serve_plotly_bundle() -> flask.Response | None:
    """dcc.Graph's plotly.js, answered with the partial bundle."""
    if flask.request.path != PLOTLY_PATH:
        return None
    return flask.send_file(PLOTLY_BUNDLE, mimetype="text/javascript", max_age=7 * 86400)


def _not_a_component_file(err: Exception) -> tuple[dict[str, str], int]:
    first = (str(err).strip().splitlines() or ["not found"])[0]
    return {"detail": f"no such dashboard file: {first[:200]}"}, 404


def mount_dashboard(app: FastAPI, *, settings: Settings, database: Database) -> None:
    """Serve the dashboard at "/" of `app`, reading `database`."""
    dash_app = get_dash_app()
    ctx = DashboardContext(settings=settings, database=database)
    app.state.dashboard = dash_app
    served: ASGIApp = WSGIMiddleware(bind(dash_app.server, ctx))
    if settings.read_token_required:
        check = gate.TokenCheck(database)
        gate.add_login_routes(app, check)
        served = gate.guard(served, check)
    app.mount("/", _api_paths_not_found(served, app), name="dashboard")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> list[str]:
    """The methods some route takes on the request's path, when none takes its method."""
    others = [r for r in routes if not isinstance(r, Mount) or r.path]  # not "/" (the dashboard)
    if not any(r.matches(scope)[0] == Match.PARTIAL for r in others):
        return []
    return [
        m
        for m in _METHODS
        if any(r.matches({**scope, "method": m})[0] == Match.FULL for r in others)
    ]


def _api_paths_not_found(asgi_app: ASGIApp, api: FastAPI) -> ASGIApp:
    """A route's path with another method answers 405 with Allow; unknown /api/... paths a
    JSON 404; neither falls through to the dashboard's HTML page (which catches "/")."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        allowed = _allowed_methods(api.router.routes, scope) if scope["type"] == "http" else []
        if allowed:
            methods = ", ".join(allowed)
            response = JSONResponse(
                {"detail": f"{scope['method']} is not allowed on {path}; use {methods}"},
                status_code=405,
                headers={"Allow": methods},
            )
            await response(scope, receive, send)
            return
        if scope["type"] == "http" and (path == "/api" or path.startswith("/api/")):
            response = JSONResponse({"detail": f"no such API path: {path}"}, status_code=404)
            await response(scope, receive, send)
            return
        await asgi_app(scope, receive, send)

    return app
