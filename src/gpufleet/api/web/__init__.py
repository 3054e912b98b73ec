"""The web dashboard: three static files served under ``/ui/``, shipped with the package.

The page carries no data and needs no token to load; it asks for one, keeps
it in the tab's ``sessionStorage`` and sends it as a bearer header on every
data request (``/v1/dashboard/map``, ``/v1/jobs``, ...), so a user sees in
the browser exactly what its token may read through the API. Nothing is
fetched from elsewhere: it works offline. The content security policy
allows scripts, styles and requests from this origin only, so no injected
markup can run.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.responses import RedirectResponse, Response

ASSETS = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "app.css": ("app.css", "text/css; charset=utf-8"),
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on each load, so an upgraded controller serves its new page at once.
    "Cache-Control": "no-cache",
}


def router() -> APIRouter:
    """Routes for the page (kept out of the OpenAPI document: they are not API)."""
    static = files(__name__) / "static"
    body = {path: (static / name).read_bytes() for path, (name, _) in ASSETS.items()}
    web = APIRouter(include_in_schema=False)

    @web.get("/")
    @web.get("/ui")
    async def home() -> RedirectResponse:
        return RedirectResponse("ui/", status_code=308)  # relative: works behind a path prefix

    @web.get("/ui/{asset}")
    @web.get("/ui/", name="ui")
    async def asset(asset: str = "") -> Response:
        if asset not in ASSETS:
            raise HTTPException(404, f"/ui/{asset}: no such file")
        return Response(body[asset], media_type=ASSETS[asset][1], headers=HEADERS)

    return web
