"""ApiVersions: exactly the APIs and versions of versions.IMPLEMENTED."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.protocol import Request
from adapter.kafka.versions import API_VERSIONS, IMPLEMENTED


def supported_versions() -> list[Any]:
    entry = API_VERSIONS.response.ApiVersion
    return [
        entry(api_key=api.key, min_version=api.min_version, max_version=api.max_version)
        for api in sorted(IMPLEMENTED.values(), key=lambda api: api.key)
    ]


async def handle(context: object, request: Request) -> Any:
    return API_VERSIONS.response[request.version](
        error_code=errors.NONE, api_keys=supported_versions(), throttle_time_ms=0
    )
