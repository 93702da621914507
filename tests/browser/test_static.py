"""The page's files as served by `outlive.web.mount` (no browser needed): content types,
caching, the Content-Security-Policy, and source rules that keep model output out of HTML."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import httpx
import pytest
from fastapi import FastAPI

from outlive import web

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def _client() -> httpx.AsyncClient:
    app = FastAPI()
    web.mount(app)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def _source(name: str) -> str:
    return (resources.files("outlive.web") / name).read_text("utf-8")


def _scripts() -> list[str]:
    return [n for n in web.asset_names() if n.endswith(".js")]


async def test_page_is_served_with_a_strict_csp() -> None:
    async with _client() as c:
        r = await c.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert '<script type="module" src="/web/app.js"></script>' in r.text


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("app.js", "text/javascript; charset=utf-8"),
        ("reducer.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("index.html", "text/html; charset=utf-8"),
    ],
)
async def test_assets_have_their_content_types(name: str, content_type: str) -> None:
    async with _client() as c:
        r = await c.get(f"/web/{name}")
        assert r.status_code == 200
        assert r.headers["content-type"] == content_type
        assert r.headers["cache-control"] == "no-cache"
        assert r.content == (resources.files("outlive.web") / name).read_bytes()
        again = await c.get(f"/web/{name}", headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304
        head = await c.head(f"/web/{name}")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(r.content))


@pytest.mark.parametrize(
    "path", ["/web/nope.js", "/web/__init__.py", "/web/..%2F__init__.py", "/web/", "/web/.x.js"]
)
async def test_only_the_page_files_are_served(path: str) -> None:
    async with _client() as c:
        r = await c.get(path)
    assert r.status_code == 404


def test_every_module_the_page_imports_is_package_data() -> None:
    names = set(web.asset_names())
    assert {"index.html", "app.js", "style.css", "reducer.js", "markdown.js"} <= names
    for script in _scripts():
        if script.startswith("vendor/"):
            continue
        for imported in re.findall(r'from "\./([\w./-]+)"', _source(script)):
            assert imported in names, f"{script} imports {imported}, which is not served"
    for sheet in re.findall(r'href="/web/([\w./-]+\.css)"', _source("index.html")):
        assert sheet in names


def _vendor_checksums() -> dict[str, str]:
    readme = _source("vendor/README.md")
    block = readme.split("## SHA-256", 1)[1]
    return {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", block,
                                                        re.M)}


async def test_vendored_libraries_are_the_published_files_with_their_licences() -> None:
    """Every vendored module is listed with its checksum (so an edit or a half-done upgrade
    fails), is served as JavaScript, and has its licence next to it."""
    sums = _vendor_checksums()
    served = {n.removeprefix("vendor/") for n in web.asset_names() if n.startswith("vendor/")}
    assert served == set(sums)
    assert {"marked.esm.js", "purify.es.mjs", "highlight.core.min.js"} <= served
    vendor = resources.files("outlive.web") / "vendor"
    for licence in ("marked.LICENSE", "dompurify.LICENSE", "dompurify.LICENSE-MPL",
                    "highlight.LICENSE"):
        assert (vendor / licence).read_text("utf-8").strip()
    async with _client() as c:
        for name, digest in sums.items():
            body = (vendor / name).read_bytes()
            assert hashlib.sha256(body).hexdigest() == digest, f"vendor/{name} was changed"
            r = await c.get(f"/web/vendor/{name}")
            assert r.status_code == 200 and r.content == body
            assert r.headers["content-type"] == "text/javascript; charset=utf-8"
            assert r.headers["content-security-policy"] == CSP
        for path in ("/web/vendor/README.md", "/web/vendor/marked.LICENSE",
                     "/web/vendor/..%2Fapp.js", "/web/vendor/nope.js"):
            assert (await c.get(path)).status_code == 404, path


def test_page_has_no_inline_code_or_style() -> None:
    """The CSP forbids inline scripts, styles and handlers; the page must not need them."""
    html = _source("index.html")
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert "<style" not in html
    assert not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)


@pytest.mark.parametrize("name", [n for n in _scripts() if "/" not in n])  # ours, not vendor/
def test_scripts_never_turn_text_into_html(name: str) -> None:
    """Server strings reach the DOM as text only: no HTML parsing sinks, no code from strings."""
    src = _source(name)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                 "DOMParser", "createContextualFragment", "eval(", "new Function",
                 "setHTMLUnsafe", ".srcdoc"):
        assert sink not in src, f"{name} uses {sink}"
    assert not re.search(r"\.style\.", src), f"{name} sets inline styles (use classes)"


def test_our_modules_stay_small() -> None:
    """The page's own modules stay readable: each well under 600 lines (vendor/ aside)."""
    for name in _scripts():
        if "/" not in name:
            assert len(_source(name).splitlines()) < 600, name
