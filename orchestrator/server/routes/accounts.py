"""Who the caller is, and the quotas an admin sets."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field

from orchestrator.server.db import User
from orchestrator.server.quotas import set_quota
from orchestrator.server.routes.dependencies import current_user, service_of
from orchestrator.server.service import Service

router = APIRouter(prefix="/api")


class QuotaBody(BaseModel):
    scope: Literal["user", "project"]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    gpu_hours: float = Field(gt=0, allow_inf_nan=False, description="finite, above 0")


@router.get("/whoami")
async def whoami(me: User = Depends(current_user)):
    return {"user": me.name, "admin": me.admin}


@router.post("/quotas")
def quota(body: QuotaBody, me: User = Depends(current_user),
          service: Service = Depends(service_of)):
    if not me.admin:
        raise HTTPException(403, "only an admin sets quotas")
    set_quota(service.db, body.scope, body.name, body.gpu_hours)
    return body.model_dump()
