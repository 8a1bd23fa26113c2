"""/api/slots: the trial slots a campaign's controller asks for, with its own slot token (not a
user's), so only that controller can hold its campaign's slots."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from orchestrator.server.auth import digest
from orchestrator.server.routes.dependencies import bearer, campaign_row, service_of
from orchestrator.server.service import Service

router = APIRouter(prefix="/api/slots")


class SlotAsk(BaseModel):
    holding: int = Field(ge=0)
    want: bool = True


@router.post("/{name}")
def slot(name: str, body: SlotAsk,
         credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
         service: Service = Depends(service_of)):
    row = campaign_row(service, name)
    if credentials is None or row.slot_digest != digest(credentials.credentials):
        raise HTTPException(401, "not this campaign's controller token")
    return {"granted": service.slots.ask(name, body.holding, body.want)}
