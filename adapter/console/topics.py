"""Topics: the list (paged, searched), a topic's partitions and configs, a config change
(Kafka's validation: mapping/operations/console_configs.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from adapter.console import web
from adapter.kafka.config_views import static_topic_defaults, topic_view
from mapping.core.keys import is_valid_name
from mapping.operations import console_topics
from mapping.operations.console_configs import alter_topic_config
from mapping.security.acls import Operation, ResourceType
from mapping.topic.config_types import InvalidConfig
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_configs import TOPIC_CONFIGS

TOPIC = ResourceType.TOPIC


async def topics(request: Request) -> Response:
    query = request.query_params.get("q", "")
    if len(query) > 249:
        raise web.Refusal(400, "the search is at most 249 characters")
    page = web.integer(request.query_params.get("page", "1") or "1", "page", low=1)
    pod = web.pod(request)
    who = await web.principal(request)
    host = web.host_of(request)

    def visible(name: str) -> bool:
        return pod.authorizer.allows(who, host, Operation.DESCRIBE, TOPIC, name)

    found = await console_topics.topics_page(pod.batcher, pod.keys, query, page, visible=visible)
    return web.render(request, "topics.html", {"found": found, "query": query})


async def find_topic(request: Request, operation: Operation) -> TopicConfig:
    """The topic the path names, once the principal may ``operation`` it (404: none)."""
    name = request.path_params["topic"]
    if not is_valid_name(name):
        raise web.Refusal(400, f"{name!r} is not a topic name (1-249 of [A-Za-z0-9._-])")
    await web.require(request, operation, TOPIC, name)
    config = await web.pod(request).topics.read(name)
    if config is None:
        raise web.Refusal(404, f"no topic {name}")
    return config


async def topic(request: Request, error: str = "", status: int = 200) -> Response:
    config = await find_topic(request, Operation.DESCRIBE)
    pod = web.pod(request)
    rows = await console_topics.partition_rows(pod.kafka, config)
    configs = []
    if await web.allowed(request, Operation.DESCRIBE_CONFIGS, TOPIC, config.name):
        dynamic = await pod.configs.load()
        static = static_topic_defaults(pod.settings)
        configs = [topic_view(config, n, dynamic, static) for n in TOPIC_CONFIGS]
    context = {"config": config, "rows": rows, "configs": configs, "error": error}
    return web.render(request, "topic.html", context, status)


async def change_config(request: Request) -> Response:
    config = await find_topic(request, Operation.ALTER_CONFIGS)
    data = await web.form(request)
    name = web.field(data, "name").strip()
    value = web.field(data, "value")
    reset = web.field(data, "action") == "default"
    if not name:
        return await topic(request, "give the name of a topic config", 400)
    try:
        await alter_topic_config(web.pod(request).topics, config, name, None if reset else value)
    except InvalidConfig as exc:
        return await topic(request, str(exc), 400)
    where = request.url_for("topic", topic=config.name)
    return RedirectResponse(f"{where}?changed={web.quote(name)}#configs", status_code=303)
