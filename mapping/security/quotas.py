"""Kafka's client quotas: the entities, their validation, the quota of a (user, client id)
pair, the sampled rate a quota is measured with, and their store in Redis.

As Apache Kafka (``ClientQuotaControlManager``, ``ClientQuotasImage``, ``ClientQuotaManager``,
``QuotaUtils``):

- an entity is a user, a client id, or both, each a name or the default (None);
- the keys are producer_byte_rate, consumer_byte_rate (whole bytes per second),
  request_percentage and controller_mutation_rate (numbers), every value above 0; anything
  else is INVALID_REQUEST with Kafka's message;
- the quota of a (user, client id) pair, for one key, is the first entity that sets it in
  this order: user and client id, user and default client id, user alone, default user and
  client id, default user and default client id, default user alone, client id alone,
  default client id alone. The matching entity also names the rate it is measured against:
  its user part (if any) and client id part (if any) are the pair's own, so a default user
  quota gives each user a rate of its own while a client-id quota is shared by every user of
  that client id;
- a rate is measured over ``samples`` windows of ``window_ms`` (quota.window.num 11,
  quota.window.size.seconds 1), the time elapsed counted as at least ``samples - 1`` whole
  windows; a request that takes it over the bound is throttled for
  ``(rate - bound) / bound * window`` (QuotaUtils.throttleTime).

The store (``QuotaStore``) keeps one hash field per (entity, key) so that two alterations of
one entity never lose each other's values, and announces each change on a channel.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import to_str
from mapping.core.kafka_errors import INVALID_REQUEST, UNSUPPORTED_VERSION
from mapping.core.keys import Keys

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# key -> whether its values are whole numbers (Kafka's LONG) rather than DOUBLE
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
_LONG_MAX = 2**63 - 1

# Describe's match types (DescribeClientQuotasRequest)
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

# (entity type, name or None for the default), sorted by type: a hashable, canonical entity
Entity = tuple[tuple[str, str | None], ...]
Quotas = dict[Entity, dict[str, float]]

ANONYMOUS_USER = "ANONYMOUS"  # Kafka's principal name for a client that did not authenticate


class QuotaError(Exception):
    """A request Kafka refuses: its error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The canonical entity of (type, name) pairs, validated as Kafka's controller does."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise QuotaError(
                INVALID_REQUEST,
                f"Invalid client quota entity, duplicate entity entry {entity_type}",
            )
        if entity_type == IP:
            raise QuotaError(INVALID_REQUEST, "IP quotas are not supported")
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaError(INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise QuotaError(INVALID_REQUEST, f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaError(INVALID_REQUEST, "Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def describe_entity(entity: Entity) -> str:
    """``user=alice,client-id=<default>``: for messages, logs and the command line."""
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def check_value(key: str, value: float) -> None:
    """Raise Kafka's INVALID_REQUEST for an unknown key or a value it does not take."""
    integral = QUOTA_KEYS.get(key)
    if integral is None:
        raise QuotaError(INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:  # (NaN too)
        raise QuotaError(INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if integral:
        if value > _LONG_MAX:
            raise QuotaError(INVALID_REQUEST, f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise QuotaError(INVALID_REQUEST, f"{key} cannot be a fractional value.")


def alteration(ops: Iterable[tuple[str, float, bool]]) -> dict[str, float | None]:
    """One entity's (key, value, remove) operations, validated: key -> value, None to remove."""
    changes: dict[str, float | None] = {}
    for key, value, remove in ops:
        if key in changes:
            raise QuotaError(INVALID_REQUEST, f"Duplicate quota key {key}")
        if remove:
            if key not in QUOTA_KEYS:
                raise QuotaError(INVALID_REQUEST, f"Invalid configuration key {key}")
            changes[key] = None
        else:
            check_value(key, value)
            changes[key] = float(value)
    return changes


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """DescribeClientQuotas' filter: entity type -> name (None: the default) to match
    exactly, types that must be present, and ``strict`` (no other types)."""

    exact: dict[str, str | None] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    strict: bool = False

    @classmethod
    def of(cls, components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
        """From the request's (entity type, match type, match) components, as Kafka checks
        them (ClientQuotasImage.describe)."""
        exact: dict[str, str | None] = {}
        present: set[str] = set()
        for entity_type, match_type, match in components:
            if not entity_type:
                raise QuotaError(INVALID_REQUEST, "Invalid empty entity type.")
            if entity_type in exact or entity_type in present:
                raise QuotaError(
                    INVALID_REQUEST,
                    f"Entity type {entity_type} cannot appear more than once in the filter.",
                )
            if entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaError(UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise QuotaError(
                        INVALID_REQUEST,
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    )
                exact[entity_type] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaError(
                        INVALID_REQUEST,
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                    )
                exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaError(
                        INVALID_REQUEST,
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match "
                        "string.",
                    )
                present.add(entity_type)
            else:
                raise QuotaError(INVALID_REQUEST, f"Unknown match type {match_type}")
        if IP in exact or IP in present:
            if {USER, CLIENT_ID} & (set(exact) | present):
                raise QuotaError(
                    INVALID_REQUEST,
                    "Invalid entity filter component combination. IP filter component should "
                    "not be used with user or clientId filter component.",
                )
        return cls(exact, frozenset(present), strict)

    def matches(self, entity: Entity) -> bool:
        names = dict(entity)
        if self.strict and len(names) != len(self.exact) + len(self.present):
            return False
        for entity_type, name in self.exact.items():
            if entity_type not in names or names[entity_type] != name:
                return False
        return all(entity_type in names for entity_type in self.present)


def precedence(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """The entities whose quota a (user, client id) pair gets, first match wins, each with
    the (user, client id) its rate is measured by (ClientQuotaManager's metric tags)."""
    u, c = (USER, user), (CLIENT_ID, client_id)
    du, dc = (USER, None), (CLIENT_ID, None)
    both = (user, client_id)
    # sorted by type: "client-id" < "user"
    return [
        ((c, u), both),
        ((dc, u), both),
        ((u,), (user, "")),
        ((c, du), both),
        ((dc, du), both),
        ((du,), (user, "")),
        ((c,), ("", client_id)),
        ((dc,), ("", client_id)),
    ]


def quota_of(
    quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[float, tuple[str, str]] | None:
    """The bound of quota ``key`` for the pair and the (user, client id) it is measured by;
    None when no entity sets it."""
    for entity, tags in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None:
            bound = values.get(key)
            if bound is not None:
                return bound, tags
    return None


class Rate:
    """Kafka's sampled rate (``Rate`` over ``SampledStat``): values per second over the last
    ``samples`` windows of ``window_ms``."""

    __slots__ = ("samples", "window_ms", "_starts", "_values")

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[float] = []  # each sample's start (ms), oldest first
        self._values: list[float] = []

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        while self._starts and now_ms - self._starts[0] >= expire:
            del self._starts[0]
            del self._values[0]

    def record(self, value: float, now_ms: float) -> None:
        self._purge(now_ms)
        if not self._starts or now_ms - self._starts[-1] >= self.window_ms:
            self._starts.append(now_ms)
            self._values.append(0.0)
            if len(self._starts) > self.samples:
                del self._starts[0]
                del self._values[0]
        self._values[-1] += value

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is taken over: since the oldest sample, at least ``samples - 1``
        whole windows (Rate.windowSize), at least 1 ms."""
        self._purge(now_ms)
        elapsed = now_ms - self._starts[0] if self._starts else 0.0
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Per second."""
        size = self.window_size_ms(now_ms)
        return sum(self._values) / (size / 1000.0)


def throttle_ms(rate: Rate, bound: float, now_ms: float) -> int:
    """How long a client whose rate is ``rate`` must wait to be back at ``bound``: 0 when it
    is within it (QuotaUtils.throttleTime)."""
    size = rate.window_size_ms(now_ms)
    measured = sum(rate._values) / (size / 1000.0)
    if measured <= bound:
        return 0
    return round((measured - bound) / bound * size)


# --- the store ---------------------------------------------------------------------------


def _field(entity: Entity, key: str) -> str:
    return json.dumps([[list(pair) for pair in entity], key], separators=(",", ":"))


def _parse_field(raw: str) -> tuple[Entity, str] | None:
    try:
        pairs, key = json.loads(raw)
        return tuple((str(t), None if n is None else str(n)) for t, n in pairs), str(key)
    except (ValueError, TypeError):
        return None  # not one of ours: ignored


def quota_field(entity: Entity, key: str) -> str:
    """The hash field of quota ``key`` of ``entity``."""
    return _field(entity, key)


def parse_quotas(fields: Mapping[object, object]) -> Quotas:
    """The quotas of the hash's fields (HGETALL's reply); fields not ours are ignored."""
    quotas: Quotas = {}
    for raw_field, raw_value in fields.items():
        parsed = _parse_field(to_str(raw_field))
        if parsed is None:
            continue
        try:
            value = float(to_str(raw_value))
        except ValueError:
            continue
        quotas.setdefault(parsed[0], {})[parsed[1]] = value
    return quotas


class QuotaStore:
    """The client quotas in Redis (``keys.client_quotas``), shared by every pod; each change
    is announced on ``keys.client_quotas_changed_channel``."""

    def __init__(self, batcher: RedisBatcher, keys: Keys) -> None:
        self.batcher = batcher
        self.keys = keys

    async def load(self) -> Quotas:
        return parse_quotas(await self.batcher.call("HGETALL", self.keys.client_quotas))

    async def alter(self, changes: Mapping[Entity, Mapping[str, float | None]]) -> None:
        """Set (a value) or remove (None) quotas, then tell every pod."""
        sets: list[str] = []
        removes: list[str] = []
        for entity, values in changes.items():
            for key, value in values.items():
                if value is None:
                    removes.append(_field(entity, key))
                else:
                    sets += [_field(entity, key), repr(float(value))]
        if not sets and not removes:
            return
        if sets:
            await self.batcher.call("HSET", self.keys.client_quotas, *sets)
        if removes:
            await self.batcher.call("HDEL", self.keys.client_quotas, *removes)
        await self.batcher.call("PUBLISH", self.keys.client_quotas_changed_channel, "changed")
