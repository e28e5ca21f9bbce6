"""The dashboard's web app: read-only, three static files and one JSON document.

``GET /`` the page, ``/page.js`` and ``/page.css`` its script and style (shipped beside this
module; the page fetches nothing from elsewhere), ``GET /api/state`` the run
(:class:`.state.DashboardState`), or ``503`` with ``{"error": …}`` while the chain cannot be
read (the page shows the error and keeps polling). There is no route that writes anything.
A Content-Security-Policy keeps the page to its own origin.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, Response

from protocol.errors import VerilocoError
from veriloco.dashboard.source import RunSource

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


def asset(name: str) -> str:
    """A file shipped with the dashboard (``page.html``, ``page.js``, ``page.css``)."""
    return (files("veriloco.dashboard") / name).read_text(encoding="utf-8")


def make_app(source: RunSource, refresh_s: float = 2.0) -> FastAPI:
    """The app for ``source``; the page polls every ``refresh_s`` seconds."""
    app = FastAPI(title="veriloco dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    page = asset("page.html").replace("{{REFRESH_MS}}", str(int(refresh_s * 1000)))
    script, style = asset("page.js"), asset("page.css")

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers=HEADERS)

    @app.get("/page.js")
    def page_js() -> Response:
        return Response(script, media_type="text/javascript", headers=HEADERS)

    @app.get("/page.css")
    def page_css() -> Response:
        return Response(style, media_type="text/css", headers=HEADERS)

    @app.get("/api/state")
    def state() -> JSONResponse:
        try:
            return JSONResponse(source.state().model_dump(mode="json"), headers=HEADERS)
        except (VerilocoError, OSError, ValueError) as exc:  # a chain that cannot be read now (LedgerError…)
            text = " ".join(str(exc).split()) or type(exc).__name__
            return JSONResponse({"error": text}, status_code=503, headers=HEADERS)

    return app
