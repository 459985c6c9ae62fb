"""The console's Starlette application: its routes, its start and stop (a pod's parts on
the deployment's Redis, only its batcher, pub/sub connection, authorizer and the sampler
running) and its refusals as pages (``Refusal``: 4xx with the message; anything else: a
500 page with one line, the traceback in the log only)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from adapter.console import deployment, groups, messages, security, topics, transactions, web
from adapter.console.sampler import Sampler
from adapter.pod import build_pod
from adapter.settings import Settings
from mapping.connection.client import connect, make_batcher
from mapping.connection.cluster import connect_sync, redact
from mapping.core.codec import DEFAULT_SEQUENCE_BITS
from mapping.core.errors import BrokerError
from mapping.core.keys import Keys
from mapping.operations.console_rates import read_sample
from mapping.security.acl_store import decode_all

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsoleOptions:
    redis_url: str
    keys: Keys
    login: dict[str, Any] = field(default_factory=dict)  # mapping.connection.cluster.credentials
    sample_interval_s: float = 5.0
    # the pods' authorization settings (serve's --authorizer, --super-users, ...)
    authorizer: bool = False
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    session_timeout_ms: int = Settings().session_timeout_ms


ROUTES = [
    Route("/", deployment.deployment, name="deployment"),
    Route("/topics", topics.topics, name="topics"),
    Route("/topics/{topic}", topics.topic, name="topic"),
    Route("/topics/{topic}/configs", topics.change_config, methods=["POST"], name="configs"),
    Route("/topics/{topic}/messages", messages.messages, name="messages"),
    Route("/topics/{topic}/tail", messages.tail, name="tail"),
    Route("/topics/{topic}/produce", messages.produce_form, name="produce_form"),
    Route("/topics/{topic}/produce", messages.produce, methods=["POST"], name="produce"),
    Route("/groups", groups.groups, name="groups"),
    Route("/groups/{group:path}/reset", groups.reset, methods=["POST"], name="reset"),
    Route("/groups/{group:path}", groups.group, name="group"),
    Route("/transactions", transactions.transactions, name="transactions"),
    Route("/acls", security.acls, name="acls"),
    Route("/quotas", security.quotas, name="quotas"),
    Route("/login", security.login_form, name="login_form"),
    Route("/login", security.login, methods=["POST"], name="login"),
    Route("/logout", security.logout, methods=["POST"], name="logout"),
    Mount("/static", StaticFiles(directory=str(web.HERE / "static")), name="static"),
]


async def refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, web.Refusal)
    return web.render(request, "error.html", {"message": exc.message}, exc.status)


async def login_required(request: Request, _exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={web.quote(target)}", status_code=303)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page" if exc.status_code == 404 else str(exc.detail)
    return web.render(request, "error.html", {"message": message}, exc.status_code)


async def failed(request: Request, exc: Exception) -> Response:
    if isinstance(exc, BrokerError):  # Redis away, a timeout: say so, in one line
        message = f"the deployment did not answer: {exc}"
    else:
        log.error("console: %s %s failed", request.method, request.url.path, exc_info=exc)
        message = f"the console failed on this page ({type(exc).__name__}); see its log"
    return web.render(request, "error.html", {"message": message}, 500)


def create_app(options: ConsoleOptions) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        client = connect(options.redis_url, **options.login)
        sampler_client = connect(options.redis_url, **options.login)
        sync_client = connect_sync(options.redis_url, **options.login)
        try:
            stored = await client.hget(options.keys.meta, "sequence_bits")
            settings = Settings(
                key_prefix=options.keys.prefix,
                sequence_bits=int(stored) if stored is not None else DEFAULT_SEQUENCE_BITS,
                session_timeout_ms=options.session_timeout_ms,
                authorizer=options.authorizer,
                super_users=options.super_users,
                allow_everyone_if_no_acl_found=options.allow_everyone_if_no_acl_found,
            )
            pod = build_pod(settings, client)
            if pod.authorizer.enabled:  # the bindings in force from the first page on
                pod.authorizer.set_bindings(decode_all(await client.smembers(pod.keys.acls)))
            # the sampler reads on a connection of its own: a page never queues behind it
            sampled = make_batcher(sampler_client)
            sampler = Sampler(
                lambda stored: read_sample(
                    sampled, pod.keys, pod.partitions.sequence_bits,
                    spread_s=options.sample_interval_s / 2, stored=stored,
                ),
                options.sample_interval_s,
            )  # fmt: skip
            app.state.console = web.Console(pod, sampler, sync_client, redact(options.redis_url))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pod.batcher.run)
                tasks.start_soon(sampled.run)
                tasks.start_soon(pod.subscriber.run)
                await pod.load_configs()
                if pod.authorizer.enabled:
                    tasks.start_soon(pod.authorizer.run, pod.subscriber)
                tasks.start_soon(sampler.run)
                try:
                    yield
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            sync_client.close()
            await sampler_client.aclose()
            await client.aclose()

    return Starlette(
        routes=ROUTES,
        middleware=[
            # signed session cookies (the signed-in user, the form token), lost at restart
            Middleware(SessionMiddleware, secret_key=secrets.token_urlsafe(32), same_site="strict")
        ],
        exception_handlers={
            web.Refusal: refused,
            web.LoginRequired: login_required,
            HTTPException: http_error,
            Exception: failed,
        },
        lifespan=lifespan,
    )
