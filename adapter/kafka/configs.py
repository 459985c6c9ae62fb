"""DescribeConfigs, AlterConfigs (legacy: replaces a resource's whole set) and
IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) on the TOPIC, BROKER and GROUP
resources, with Kafka's errors and messages (ConfigAdminManager, ConfigHelper,
ControllerConfigurationValidator).

Topic configs live in the topic hash (mapping/topic/topics.py writes them; every pod reads the
topic again on the change notice); the cluster-wide broker configs and the group configs in
their hashes (mapping/topic/broker_configs.py). The catalogues (mapping/topic/topic_configs.py,
mapping/topic/broker_configs.py) validate every value. The pods are equal, stateless brokers:
broker configs are altered at the default cluster level (resource name "") only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.config_views import (
    ConfigView,
    broker_view,
    group_view,
    static_broker_configs,
    topic_view,
)
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from mapping.core.errors import BrokerError
from mapping.security.acls import Operation
from mapping.topic.broker_configs import (
    ALL_GROUP_CONFIGS,
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    SHARE_GROUP_CONFIGS,
    broker_changes,
    check_dynamic,
    group_changes,
)
from mapping.topic.config_types import (
    ConfigSource,
    ConfigType,
    InvalidConfig,
)
from mapping.topic.topic_config import config_field
from mapping.topic.topic_configs import (
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIGS,
    check_topic_configs,
)

TOPIC, BROKER, GROUP = 2, 4, 32


def _share_group_view(name: str, stored: dict[str, str]) -> ConfigView:
    definition = SHARE_GROUP_CONFIGS[name]
    synonyms: list[tuple[str, str | None, ConfigSource]] = []
    if name in stored:
        synonyms.append((name, stored[name], ConfigSource.GROUP_CONFIG))
    synonyms.append((name, definition.default, ConfigSource.DEFAULT_CONFIG))
    return ConfigView(definition, synonyms[0][1], synonyms[0][2], synonyms)


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


# Kafka's messages of DescribeConfigs' denials (Errors.*.message)
DENIAL_MESSAGES = {
    errors.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    errors.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    errors.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}


class Refused(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def _static(context: KafkaContext, broker_id: int) -> dict[str, str]:
    for node, host, port in await context.brokers():
        if node == broker_id:
            return static_broker_configs(context.pod.settings, node, host, port)
    host, port = context.advertised_host, context.advertised_port
    return static_broker_configs(context.pod.settings, broker_id, host, port)


async def _broker_id(context: KafkaContext, name: str) -> int:
    """The live broker resource ``name`` names (INVALID_REQUEST otherwise, Kafka's words)."""
    try:
        broker_id = int(name)
    except ValueError:
        raise Refused(
            errors.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    ids = [node for node, _, _ in await context.brokers()]
    if broker_id not in ids:
        raise Refused(
            errors.INVALID_REQUEST,
            f"Unexpected broker id, expected one of {ids} or empty string, but received {name}",
        )
    return broker_id


def _entry(result_class: Any, view: ConfigView, synonyms: bool, documentation: bool) -> Any:
    Synonym = result_class.DescribeConfigsSynonym
    # v0 has no config source, only is_default (Kafka 3.9 left it false; it says what v1+'s
    # DEFAULT_CONFIG source says, as the brokers of v0's time did)
    return result_class(
        name=view.definition.name, value=view.value, read_only=view.read_only,
        config_source=int(view.source), is_sensitive=False,
        is_default=view.source == ConfigSource.DEFAULT_CONFIG,
        synonyms=[Synonym(name=n, value=v, source=int(s)) for n, v, s in view.synonyms]
        if synonyms else [],
        config_type=int(view.definition.type),
        documentation=view.definition.doc if documentation else None,
    )  # fmt: skip


async def _views(context: KafkaContext, resource_type: int, name: str) -> list[ConfigView]:
    store = context.pod.configs
    if resource_type == TOPIC:
        if not name:
            raise Refused(errors.INVALID_REQUEST, "Default topic resources are not allowed.")
        config = await context.find_topic(name)
        config = await context.pod.topics.read(name) if config is not None else None
        if config is None:
            raise Refused(errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        dynamic = await store.load()
        static = await _static(context, context.registry.node_id or 0)
        return [topic_view(config, n, dynamic, static) for n in TOPIC_CONFIGS]
    if resource_type == BROKER:
        dynamic = await store.load()
        if not name:  # the default cluster level: what is set there (as Kafka)
            return [broker_view(n, dynamic, {}) for n in BROKER_CONFIGS if n in dynamic]
        static = await _static(context, await _broker_id(context, name))
        return [broker_view(n, dynamic, static) for n in BROKER_CONFIGS]
    if resource_type == GROUP:
        if not name:
            raise Refused(errors.INVALID_REQUEST, "Group name must not be empty")
        stored = await store.group(name)
        static = await _static(context, context.registry.node_id or 0)
        return [group_view(n, stored, static) for n in GROUP_CONFIGS] + [
            _share_group_view(n, stored) for n in SHARE_GROUP_CONFIGS
        ]
    raise Refused(errors.INVALID_REQUEST, f"Unsupported resource type: {resource_type}")


async def describe_configs(context: KafkaContext, request: Request) -> Any:
    response = DESCRIBE_CONFIGS.response
    Result = response.DescribeConfigsResult
    Entry = Result.DescribeConfigsResourceResult
    body = request.body
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    checked = context.authorizer.enabled
    results = []
    for resource in body.resources or ():
        result = Result(
            error_code=errors.NONE, error_message=None, resource_type=resource.resource_type,
            resource_name=resource.resource_name, configs=[],
        )  # fmt: skip
        wanted = resource.configuration_keys
        try:
            if checked:
                code = await authorization.config_refusal(
                    context, request, Operation.DESCRIBE_CONFIGS,
                    resource.resource_type, resource.resource_name or "",
                )  # fmt: skip
                if code != errors.NONE:
                    raise Refused(code, DENIAL_MESSAGES[code])
            views = await _views(context, resource.resource_type, resource.resource_name or "")
            result.configs = [
                _entry(Entry, view, synonyms, documentation)
                for view in views
                if not wanted or view.definition.name in wanted
            ]
        except Refused as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, results=results)


def _duplicates(resources: list[Any]) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    twice = set()
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        (twice if key in seen else seen).add(key)
    return twice


async def _apply(
    context: KafkaContext, resource: Any, ops: list[tuple[str, int, str | None]],
    replace: bool, validate_only: bool,
) -> None:  # fmt: skip
    """Apply ``ops`` ((name, operation, value)) to ``resource`` (``replace``: the legacy
    AlterConfigs, whose configs replace the whole set)."""
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        raise Refused(errors.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [name for name, op, value in ops if op != DELETE and value is None]
    if nulls:
        raise Refused(errors.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    unknown_ops = [op for _, op, _ in ops if op not in (SET, DELETE, APPEND, SUBTRACT)]
    if unknown_ops:
        raise Refused(errors.INVALID_REQUEST, f"Unknown operations type {unknown_ops[0]}")
    kind, name = resource.resource_type, resource.resource_name or ""
    if kind == TOPIC:
        await _alter_topic(context, name, ops, replace, validate_only)
    elif kind == BROKER:
        await _alter_broker(context, name, ops, replace, validate_only)
    elif kind == GROUP:
        await _alter_group(context, name, ops, replace, validate_only)
    else:
        raise Refused(errors.INVALID_REQUEST, f"Unknown resource type {kind}")


def _updated(
    current: Mapping[str, str], ops: list[tuple[str, int, str | None]], replace: bool,
    catalogue: Mapping[str, Any], unknown: str,
) -> dict[str, str]:  # fmt: skip
    """The set of configs after ``ops`` (ConfigAdminManager.prepareIncrementalConfigs)."""
    updated = {} if replace else dict(current)
    for name, op, value in ops:
        definition = catalogue.get(name)
        if definition is None:
            raise Refused(errors.INVALID_CONFIG, f"{unknown}: {name}")
        if op in (APPEND, SUBTRACT) and definition.type != ConfigType.LIST:
            verb = "append" if op == APPEND else "subtract"
            raise Refused(
                errors.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}"
            )
        old_text = updated.get(name, definition.default or "")
        old = [v for v in old_text.split(",") if v]
        given = (value or "").split(",")
        if op == SET:
            updated[name] = value or ""
        elif op == DELETE:
            updated.pop(name, None)
        elif op == APPEND:
            updated[name] = ",".join(old + [v for v in given if v not in old])
        else:
            updated[name] = ",".join(v for v in old if v not in given)
    return updated


async def _alter_topic(
    context: KafkaContext, name: str, ops: list[tuple[str, int, str | None]], replace: bool,
    validate_only: bool,
) -> None:  # fmt: skip
    if not name:
        raise Refused(errors.INVALID_REQUEST, "Default topic resources are not allowed.")
    config = await context.find_topic(name)
    config = await context.pod.topics.read(name) if config is not None else None
    if config is None:
        raise Refused(errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
    by_field = {config_field(n): n for n in TOPIC_CONFIGS}
    current = {by_field[f]: v for f, v in config.overrides if f in by_field}
    current[MIN_INSYNC_REPLICAS] = str(config.min_insync_replicas)
    updated = _updated(current, ops, replace, TOPIC_CONFIGS, "Unknown topic config name")
    if MIN_INSYNC_REPLICAS not in updated:  # structural: back to the cluster's default
        default = context.pod.topics.default_min_isr()
        updated[MIN_INSYNC_REPLICAS] = str(min(default, config.replication_factor))
    try:
        check_topic_configs({n: v for n, v in updated.items() if current.get(n) != v})
        check_topic_configs(updated)  # and the rules across configs
    except InvalidConfig as exc:
        raise Refused(errors.INVALID_CONFIG, str(exc)) from None
    changes: dict[str, str | int | None] = {
        config_field(n): v for n, v in updated.items() if current.get(n) != v
    }
    changes.update({config_field(n): None for n in current if n not in updated})
    if changes and not validate_only:
        await context.pod.topics.alter_configs(name, changes)


async def _alter_broker(
    context: KafkaContext, name: str, ops: list[tuple[str, int, str | None]], replace: bool,
    validate_only: bool,
) -> None:  # fmt: skip
    if name:
        await _broker_id(context, name)
        if ops:
            listed = ", ".join(n for n, _, _ in ops)
            raise Refused(
                errors.INVALID_REQUEST,
                "Cannot update these configs at broker level, the pods share one set: "
                f"use the default cluster level (resource name ''): Set({listed})",
            )
        return
    try:
        check_dynamic(n for n, _, _ in ops)
    except InvalidConfig as exc:
        raise Refused(errors.INVALID_REQUEST, str(exc)) from None
    store = context.pod.configs
    current = await store.load()
    updated = _updated(current, ops, replace, BROKER_CONFIGS, "Unknown config name")
    try:
        changes = broker_changes(current, updated)
    except InvalidConfig as exc:  # Kafka: INVALID_REQUEST here (KAFKA-13609)
        raise Refused(errors.INVALID_REQUEST, str(exc)) from None
    if changes and not validate_only:
        await store.alter_broker(changes)


async def _alter_group(
    context: KafkaContext, name: str, ops: list[tuple[str, int, str | None]], replace: bool,
    validate_only: bool,
) -> None:  # fmt: skip
    if not name:
        raise Refused(errors.INVALID_REQUEST, "Default group resources are not allowed.")
    store = context.pod.configs
    current = await store.group(name)
    updated = _updated(current, ops, replace, ALL_GROUP_CONFIGS, "Unknown group config name")
    try:
        changes = group_changes(current, updated, store.dynamic)
    except InvalidConfig as exc:
        raise Refused(errors.INVALID_CONFIG, str(exc)) from None
    if changes and not validate_only:
        await store.alter_group(name, changes)


async def _alter(context: KafkaContext, request: Request, api: Any, incremental: bool) -> Any:
    response = api.response
    resources = list(request.body.resources or ())
    twice = _duplicates(resources)
    checked = context.authorizer.enabled
    results = []
    for resource in resources:
        result = response.AlterConfigsResourceResponse(
            error_code=errors.NONE, error_message=None,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        )  # fmt: skip
        try:
            if (resource.resource_type, resource.resource_name) in twice:
                raise Refused(errors.INVALID_REQUEST, "Each resource must appear at most once.")
            if checked:  # ALTER_CONFIGS on the resource (Kafka: no message)
                code = await authorization.config_refusal(
                    context, request, Operation.ALTER_CONFIGS,
                    resource.resource_type, resource.resource_name or "",
                )  # fmt: skip
                if code != errors.NONE:
                    raise Refused(code, None)
            ops = [
                (c.name, c.config_operation if incremental else SET, c.value)
                for c in resource.configs or ()
            ]
            if not incremental:
                nulls = [n for n, _, v in ops if v is None]
                if nulls and resource.resource_type == TOPIC:
                    raise Refused(
                        errors.INVALID_CONFIG,
                        f"Null value not supported for topic configs: {','.join(nulls)}",
                    )
            await _apply(context, resource, ops, not incremental, request.body.validate_only)
        except Refused as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, responses=results)


async def incremental_alter_configs(context: KafkaContext, request: Request) -> Any:
    return await _alter(context, request, INCREMENTAL_ALTER_CONFIGS, incremental=True)


async def alter_configs(context: KafkaContext, request: Request) -> Any:
    """The legacy AlterConfigs: each resource's configs replace its whole set."""
    return await _alter(context, request, ALTER_CONFIGS, incremental=False)
