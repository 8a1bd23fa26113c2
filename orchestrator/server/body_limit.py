"""A bound on request bodies, applied before anything reads one: FastAPI reads a body whole
before it checks the caller's token or parses the JSON, so without it an unauthenticated client
could make the server hold whatever it sends.

A declared `Content-Length` over the bound is answered 413 at once, the body unread; a chunked
body is counted as it arrives and refused (413) once past the bound. Either way the connection
is closed rather than drained.
"""

from __future__ import annotations

from fastapi import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The largest submission is a spec of 1 MiB (escaped in JSON, at most a few times that) with
# its overrides; nothing the API takes comes near this.
MAX_BODY_BYTES = 8 << 20


def too_large(limit: int) -> str:
    return (f"request body over {limit // (1 << 20)} MiB; a campaign spec is a few KB: "
            "shorten it")


class BodyLimit:
    """ASGI middleware: requests whose body exceeds `limit` bytes get 413."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            response = JSONResponse({"detail": too_large(self.limit)}, 413,
                                    headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        await self.app(scope, self._counting(receive), send)

    def _counting(self, receive: Receive) -> Receive:
        """`receive`, refusing the request once its body has passed the limit. The refusal is
        an HTTPException, which the app answers from wherever it was reading the body."""
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, too_large(self.limit), headers={"Connection": "close"})
            return message

        return counted
