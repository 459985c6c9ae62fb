"""ApiVersions: exactly the APIs and versions of versions.IMPLEMENTED."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.protocol import Request
from adapter.kafka.versions import API_VERSIONS, supported_versions


async def handle(context: object, request: Request) -> Any:
    return API_VERSIONS.response[request.version](
        error_code=errors.NONE, api_keys=supported_versions(), throttle_time_ms=0
    )
