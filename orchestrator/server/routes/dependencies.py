"""What every route may ask FastAPI for: the service, the caller (from the bearer token) and a
campaign's row, each one line in `detail` when missing."""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.server.db import Campaign, User
from orchestrator.server.service import Service
from orchestrator.server.trust import may_see

bearer = HTTPBearer(auto_error=False)


def service_of(request: Request) -> Service:
    return request.app.state.service


# The polled paths (user, campaign, campaigns) are async: their work is a few short reads (the
# token's, looked up on every request so a deleted one stops at once), cheaper on the event
# loop than a hand-off to the thread pool.
async def current_user(request: Request,
                       credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
                       ) -> User:
    found = request.app.state.authenticate(credentials.credentials) if credentials else None
    if found is None:
        raise HTTPException(401, "missing or unknown token; create one with "
                                 "`paratune server token create --user NAME`",
                            headers={"WWW-Authenticate": "Bearer"})
    return found


def campaign_row(service: Service, name: str, me: User | None = None) -> Campaign:
    """The campaign's row; for a caller (`me`), only a campaign they may see: any other reads
    as missing, so its existence is not told either."""
    with service.db.session() as s:
        row = s.get(Campaign, name)
    if row is None or (me is not None and not may_see(service.db, me, row)):
        raise HTTPException(404, f"no campaign {name!r} on this server; see `paratune ls`")
    return row
