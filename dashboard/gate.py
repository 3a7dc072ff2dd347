"""With ETT_READ_TOKEN_REQUIRED the dashboard is closed like the REST reads: a read or admin
token, as a bearer header or from the /login page (an HttpOnly cookie), opens it."""

from __future__ import annotations

import html
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from backend.auth import service as auth_service
from backend.db import Database

COOKIE = "ett_token"

_LOGIN = """<!doctype html><html><head><meta charset="utf-8"><title>ETT% · sign in</title>
<style>body{{font-family:system-ui,sans-serif;background:#f6f7f9;margin:0}}
header{{background:#1e2433;color:#fff;padding:12px 24px;font-weight:700}}
main{{max-width:520px;margin:48px auto;background:#fff;padding:24px;border:1px solid #ddd}}
input{{width:100%;padding:8px;margin:8px 0;box-sizing:border-box}}
.err{{color:#b71c1c;font-weight:600}}</style></head>
<body><header>ETT%</header><main><h1>Sign in</h1>
<p>This server requires a token to read (ETT_READ_TOKEN_REQUIRED). Paste a <b>read</b> or
<b>admin</b> token; an operator creates one with
<code>ett token create --name you --scope read</code>.</p>
<p class="err" id="login-error">{error}</p>
<form method="post" action="/login"><input type="hidden" name="next" value="{next}">
<input type="password" name="token" id="login-token" placeholder="ett_..." autofocus>
<button type="submit" id="login-submit">Sign in</button></form></main></body></html>"""


class TokenCheck:
    """Answers whether a secret is a live read/admin token, asking the database every time.

    No answer is cached: a token revoked or expired (by `ett token revoke`, the admin API or
    another replica) closes the dashboard on the very next request. The lookup is one indexed
    SELECT; its last-used time is written at most once a minute.
    """

    def __init__(self, database: Database) -> None:
        self.database = database

    def refusal(self, secret: str | None) -> str | None:
        """None when the secret opens the dashboard; otherwise why not ('' when none was sent)."""
        if not secret:
            return ""
        # A read (on SQLite it takes no write lock); the use is recorded in a bounded write.
        with self.database.read_session() as s:
            try:
                row = auth_service.resolve(db_session=s, secret=secret, record_use=False)
            except auth_service.TokenRefused as err:
                return f"{str(err)[:1].upper()}{str(err)[1:]}."
            s.expunge(row)
        auth_service.record_use(engine=self.database.engine, token=row)
        if not auth_service.allows_scope(row, "read"):
            return f"Token {row.name!r} has scope {row.scope!r}; the dashboard needs read or admin."
        return None

    def allows(self, secret: str | None) -> bool:
        """True for a live token of scope read or admin."""
        return self.refusal(secret) is None


def _secret(headers: dict[bytes, bytes]) -> str | None:
    scheme, _, value = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


def _login_page(next_path: str, error: str = "", status: int = 401) -> HTMLResponse:
    return HTMLResponse(
        _LOGIN.format(next=html.escape(next_path, quote=True), error=html.escape(error)),
        status_code=status,
    )


def _safe_next(value: str | None) -> str:
    # Only paths on this server: no scheme, no host, no protocol-relative //.
    if not value or not value.startswith("/") or value.startswith("//"):
        return "/"
    return value


def guard(asgi_app: ASGIApp, check: TokenCheck) -> ASGIApp:
    """Wrap the dashboard: pages answer the sign-in form, other requests a JSON 401."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await asgi_app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        refusal = await run_in_threadpool(check.refusal, _secret(headers))
        if refusal is None:
            await asgi_app(scope, receive, send)
            return
        path = scope.get("path", "/")
        query = scope.get("query_string", b"").decode("latin-1")
        accepts_html = b"text/html" in headers.get(b"accept", b"")
        response: Response
        if scope.get("method") == "GET" and accepts_html:
            response = _login_page(path + (f"?{query}" if query else ""), refusal)
        else:
            detail = "this dashboard needs a read token: sign in at /login"
            response = JSONResponse(
                {"detail": f"{refusal} {detail}" if refusal else detail}, status_code=401
            )
        await response(scope, receive, send)

    return app


def _cross_site(request: Request) -> str | None:
    """The other site a browser says this request came from, or None for this one (or none).

    The browser's Origin header (sent with every cross-origin POST), else its Referer, must name
    this server's own host and port; Sec-Fetch-Site: cross-site is refused too. A client that
    sends none of them (curl, a script) is no browser on another site, and is let through.
    """
    if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
        return request.headers.get("origin") or "another site"
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return None
    if source == "null":
        return "an opaque origin (null)"
    host = urlsplit(source).netloc.lower()
    return None if host and host == request.headers.get("host", "").lower() else source[:200]


def add_login_routes(app: FastAPI, check: TokenCheck) -> None:
    """GET/POST /login and /logout, registered before the dashboard's catch-all mount."""

    @app.get("/login", include_in_schema=False)
    def login_form(next: str | None = None) -> Response:
        return _login_page(_safe_next(next), status=200)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        foreign = _cross_site(request)
        if foreign is not None:
            # Login CSRF: another site's form would sign this browser in with a token of its own.
            return JSONResponse(
                {
                    "detail": f"sign-in refused: the form was sent from {foreign}, not from this "
                    "dashboard; open /login here and sign in"
                },
                status_code=403,
            )
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        target = _safe_next((form.get("next") or ["/"])[0])
        refusal = await run_in_threadpool(check.refusal, token)
        if refusal is not None:
            why = f" {refusal}" if refusal else ""
            return _login_page(target, f"That is not a live read or admin token.{why}")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE, token, httponly=True, samesite="strict", max_age=12 * 3600, path="/"
        )
        return response

    @app.get("/logout", include_in_schema=False)
    def logout() -> Response:
        response = RedirectResponse("/login?next=" + quote("/"), status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response
