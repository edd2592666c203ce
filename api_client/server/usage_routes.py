"""``GET /v1/usage``: the model spend of the request's tenant per UTC day, what a platform bills
its customer from. The route's client is the tenant's own (``server_state``): another tenant's
spend is never in the answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from api_client.contract.usage import MAX_USAGE_DAYS
from api_client.server.schemas import UsageReport
from api_client.server.server_state import authorize, server_state

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["usage"], dependencies=[Depends(authorize)])


@router.get("/usage", response_model=UsageReport)
async def usage(request: Request,
                days: Annotated[int, Query(ge=1, le=MAX_USAGE_DAYS,
                                           description="how many UTC days, today "
                                                       "included")] = 7) -> UsageReport:
    """Tokens and USD of the token's tenant per UTC day, speculative drafts apart."""
    state = server_state(request)
    client = state.client
    return UsageReport(tenant=client.settings.tenant, days=await client.usage(days))
