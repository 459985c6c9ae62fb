"""ApiVersions: exactly the APIs and versions of versions.IMPLEMENTED, and the features Kafka
4.2 advertises for what the pods serve: ``share.version`` 1 (KIP-932's share groups),
supported and finalized."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.protocol import Request
from adapter.kafka.versions import API_VERSIONS, supported_versions

# feature -> (min supported, max supported, finalized level)
FEATURES: dict[str, tuple[int, int, int]] = {"share.version": (0, 1, 1)}
# The finalized features never change: one epoch for good (valid epochs are >= 0).
FINALIZED_FEATURES_EPOCH = 0


async def handle(context: object, request: Request) -> Any:
    response = API_VERSIONS.response
    answer = response[request.version](
        error_code=errors.NONE, api_keys=supported_versions(), throttle_time_ms=0
    )
    if request.version >= 3:
        # KIP-1022: before v4, features whose minimum supported version is 0 are omitted
        answer.supported_features = [
            response.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, (low, high, _) in FEATURES.items()
            if request.version >= 4 or low > 0
        ]
        answer.finalized_features_epoch = FINALIZED_FEATURES_EPOCH
        answer.finalized_features = [
            response.FinalizedFeatureKey(
                name=name, max_version_level=level, min_version_level=level
            )
            for name, (_, _, level) in FEATURES.items()
            if level > 0
        ]
    return answer
