"""The workbench page (docs/architecture.md §2, §6): static HTML, CSS and ES modules, no build step.

`mount(app)` serves the page at `/` and its assets at `/web/<file>`. The files are package
data, read once when mounted; each response carries `Cache-Control: no-cache` with an ETag (so
a browser revalidates cheaply and never runs a stale script after an upgrade) and a strict
Content-Security-Policy: scripts and styles only from this origin, no inline code, no frames,
no plugins. The page renders every server string as text (never as HTML), and the CSP is the
second wall should that ever slip.

The page talks only to `/v1` (cookie login, the owner stream, session streams). Its watcher
constants can be overridden with query parameters, e.g. `/?health_sample_ms=200&degraded_after=3`
(see `config.js`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

__all__ = ["CONTENT_SECURITY_POLICY", "VENDOR", "asset_names", "mount"]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
}

_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
}

_PAGE_HEADERS = {**_HEADERS, "X-Frame-Options": "DENY"}


@dataclass(frozen=True)
class _Asset:
    body: bytes
    media_type: str
    etag: str


def _suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


VENDOR = "vendor"
"""Third-party ES modules (and their licences), served at `/web/vendor/<file>`; see
vendor/README.md for versions and checksums."""


def _load() -> dict[str, _Asset]:
    assets: dict[str, _Asset] = {}
    root = resources.files(__name__)
    for prefix, folder in (("", root), (f"{VENDOR}/", root / VENDOR)):
        for entry in folder.iterdir():
            name = entry.name
            media_type = _TYPES.get(_suffix(name))
            if media_type is None or not entry.is_file() or name.startswith("."):
                continue
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            assets[prefix + name] = _Asset(body, media_type, etag)
    if "index.html" not in assets:
        raise RuntimeError("outlive.web: index.html is missing from the package data")
    return assets


def asset_names() -> list[str]:
    """The files `/web/<file>` serves (tests check that each one exists and is served)."""
    return sorted(_load())


def _send(request: Request, asset: _Asset, headers: dict[str, str]) -> Response:
    out = {**headers, "ETag": asset.etag}
    inm = request.headers.get("if-none-match")
    if inm is not None and asset.etag in {t.strip() for t in inm.split(",")}:
        return Response(status_code=304, headers=out)
    if request.method == "HEAD":
        out["Content-Length"] = str(len(asset.body))
        return Response(status_code=200, headers=out, media_type=asset.media_type)
    return Response(asset.body, media_type=asset.media_type, headers=out)


def _not_found() -> JSONResponse:
    return JSONResponse(
        {"error": {"code": "NOT_FOUND", "message": "no such file"}},
        status_code=404,
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


def mount(app: FastAPI) -> None:
    """Serve the page at `/` and its files at `/web/<file>` on `app` (not in the OpenAPI)."""
    assets = _load()
    page = assets["index.html"]

    async def index(request: Request) -> Response:
        return _send(request, page, _PAGE_HEADERS)

    async def asset(name: str, request: Request) -> Response:
        found = assets.get(name)
        if found is None:
            return _not_found()
        return _send(request, found, _PAGE_HEADERS if name == "index.html" else _HEADERS)

    async def vendor_asset(name: str, request: Request) -> Response:
        return await asset(f"{VENDOR}/{name}", request)

    app.add_api_route("/", index, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route(
        "/web/{name}", asset, methods=["GET", "HEAD"], include_in_schema=False
    )
    app.add_api_route(
        f"/web/{VENDOR}/{{name}}", vendor_asset, methods=["GET", "HEAD"],
        include_in_schema=False,
    )
