"""The token playground that ``bpetok serve`` shows at ``/``: one static page (index.html, app.js,
style.css beside this file), no build step and nothing fetched from elsewhere, so it works offline.
It talks to the server's own /models, /tokenize (``with_offsets``) and /apply-template.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["STATIC_FILES", "playground_routes"]

# URL path -> (file beside this module, media type)
STATIC_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/playground/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/playground/style.css": ("style.css", "text/css; charset=utf-8"),
}
# The page may load only itself and talk only to this server.
_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'",
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
}


def playground_routes() -> list:
    """Starlette routes serving the page's files, read once (a few kilobytes)."""
    from starlette.responses import Response
    from starlette.routing import Route

    here = files(__name__)
    routes = []
    for path, (name, media_type) in STATIC_FILES.items():
        body = here.joinpath(name).read_bytes()

        async def serve(request, body=body, media_type=media_type) -> Response:
            return Response(body, media_type=media_type, headers=_HEADERS)

        routes.append(Route(path, serve, methods=["GET", "HEAD"]))
    return routes
