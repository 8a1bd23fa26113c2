"""The HTTP client of the campaign service (`paratune server`), for the commands that talk to
it. The server is given by `--server URL` or $PARATUNE_SERVER, the user's token by `--token` or
$PARATUNE_TOKEN. Every failure (server away, bad token, refused request) is a UserError whose
message is one line: the server's own `detail` when it answered with one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import httpx
import typer

from orchestrator import __version__
from orchestrator.common.errors import UserError, excerpt, one_line

SERVER_ENV, TOKEN_ENV = "PARATUNE_SERVER", "PARATUNE_TOKEN"
# A campaign in one of these states changes no more (its log is complete once drained).
FINAL_STATES = ("finished", "failed", "cancelled", "refused")

SERVER_OPTION = typer.Option(
    None, "--server", metavar="URL",
    help=f"the campaign service, e.g. http://host:8470 (default: ${SERVER_ENV})")
TOKEN_OPTION = typer.Option(
    None, "--token", help=f"your API token for --server (default: ${TOKEN_ENV})")


def server_url(flag: Optional[str]) -> Optional[str]:
    """--server, else $PARATUNE_SERVER, else None (work on the local runs directory)."""
    url = (flag or os.environ.get(SERVER_ENV) or "").strip()
    return url or None


@dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int  # where the next read starts
    state: str  # the campaign's state when the chunk was read


class ServiceClient:
    def __init__(self, url: str, token: str, timeout_s: float = 60.0):
        self.url = _normal_url(url)
        self._http = httpx.Client(
            base_url=self.url, timeout=httpx.Timeout(timeout_s, connect=10.0),
            headers={"Authorization": f"Bearer {token}",
                     "User-Agent": f"paratune/{__version__}"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ServiceClient":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the API

    def submit(self, spec_yaml: str, overrides: list[str], priority: int,
               project: Optional[str], workdir: str) -> dict[str, Any]:
        body = {"spec_yaml": spec_yaml, "set": overrides, "priority": priority,
                "project": project, "workdir": workdir}
        return self._json("POST", "/api/campaigns", json=body)

    def campaigns(self) -> list[dict[str, Any]]:
        return self._json("GET", "/api/campaigns")["campaigns"]

    def campaign(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/api/campaigns/{_segment(name)}")

    def cancel(self, name: str) -> dict[str, Any]:
        return self._json("POST", f"/api/campaigns/{_segment(name)}/cancel")

    def logs(self, name: str, offset: int = 0) -> LogChunk:
        reply = self._request("GET", f"/api/campaigns/{_segment(name)}/logs",
                              params={"offset": offset})
        try:
            following = int(reply.headers.get("X-Log-Offset", ""))
        except ValueError:
            following = offset + len(reply.content)
        return LogChunk(reply.text, following, reply.headers.get("X-Campaign-State", ""))

    def best(self, name: str, fmt: str) -> str:
        return self._request("GET", f"/api/campaigns/{_segment(name)}/best",
                             params={"format": fmt}).text

    # ------------------------------------------------------------------ plumbing

    def _json(self, method: str, path: str, **kw) -> Any:
        reply = self._request(method, path, **kw)
        try:
            return reply.json()
        except ValueError:
            raise UserError(f"{self.url} answered {path} with something other than JSON; "
                            "is --server a ParaTune server?") from None

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            reply = self._http.request(method, path, **kw)
        except httpx.ConnectError:
            raise UserError(f"cannot reach the ParaTune server at {self.url}; start it with "
                            "`paratune server` or check --server") from None
        except httpx.TimeoutException:
            raise UserError(f"the ParaTune server at {self.url} did not answer in time; "
                            "try again, or check --server") from None
        except httpx.HTTPError as exc:
            raise UserError(one_line(f"the ParaTune server at {self.url} could not be asked "
                                     f"({exc.__class__.__name__}: {exc}); check --server")) from None
        if reply.is_success:
            return reply
        raise UserError(self._refusal(reply))

    def _refusal(self, reply: httpx.Response) -> str:
        """The server's one-line `detail`, or what the status code says."""
        try:
            detail = reply.json().get("detail")
        except (ValueError, AttributeError):
            detail = None
        if isinstance(detail, str) and detail.strip():
            return one_line(detail)
        if reply.status_code >= 500:
            return (f"the ParaTune server at {self.url} failed (HTTP {reply.status_code}); "
                    "see the server's log")
        return (f"{self.url} refused the request (HTTP {reply.status_code} "
                f"{reply.reason_phrase}); is --server a ParaTune server?")


def connect(server: str, token: Optional[str]) -> ServiceClient:
    """A client for `server` with --token or $PARATUNE_TOKEN (a one-line error without)."""
    token = (token or os.environ.get(TOKEN_ENV) or "").strip()
    if not token:
        raise UserError(f"no token for the ParaTune server at {_normal_url(server)}: pass "
                        f"--token TOKEN or set ${TOKEN_ENV} (an admin creates one with "
                        "`paratune server token create --user NAME`)")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise UserError(f"--token: {excerpt(token, 40)} is not a token (tokens are printable "
                        "ASCII without spaces); check --token or $PARATUNE_TOKEN")
    return ServiceClient(server, token)


def _normal_url(url: str) -> str:
    given = url.strip()
    url = given if "://" in given else f"http://{given}"
    try:
        parsed = httpx.URL(url)
    except Exception:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UserError(f"--server: {excerpt(given)} is not an http(s) URL; give e.g. "
                        "http://HOST:8470 (or set $PARATUNE_SERVER)")
    return url.rstrip("/")


def _segment(name: str) -> str:
    """A campaign name as one path segment (a name never holds '/', but a typo may)."""
    from urllib.parse import quote

    return quote(name, safe="")
