"""Login (the deployment's users: their SCRAM credentials in Redis, or the password hash
``adapter user add`` stores), logout, and the ACL and quota pages (read-only). No secret is
ever shown: a user's name is all the console says of it."""

from __future__ import annotations

import asyncio

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from adapter.console import web
from mapping.core import codec
from mapping.security.acl_store import AclStore
from mapping.security.acls import Operation, ResourceType
from mapping.security.auth import (
    CredentialsError,
    dummy_hash,
    parse_scram_secrets,
    scram_password_check,
    verify_password,
)
from mapping.security.quotas import describe_entity, parse_quotas

CLUSTER = ResourceType.CLUSTER
MAX_FIELD = 1024


def password_matches(password: str, scram: str | None, hashed: str | None) -> bool:
    """Whether ``password`` is the user's: its SCRAM secrets (Kafka's users), else the
    scrypt hash (``adapter user add`` stores both). An unknown user costs the same."""
    if scram:
        try:
            secrets = parse_scram_secrets(scram)
        except CredentialsError:
            secrets = {}
        if secrets:
            mechanism, secret = sorted(secrets.items())[0]
            return scram_password_check(password, secret, mechanism)
    matches = verify_password(password, hashed or dummy_hash())
    return matches and hashed is not None


def safe_next(target: str) -> str:
    """Where to go after the login: a path of this console only."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


async def login_form(request: Request) -> Response:
    if not await web.users_on(request):
        return RedirectResponse("/", status_code=303)
    nxt = safe_next(request.query_params.get("next", "/"))
    return web.render(request, "login.html", {"next": nxt, "error": ""})


async def login(request: Request) -> Response:
    data = await web.form(request)
    user = web.field(data, "username").strip()
    password = web.field(data, "password")
    nxt = safe_next(web.field(data, "next", "/"))
    if not user or not password or len(user) > MAX_FIELD or len(password) > MAX_FIELD:
        context = {"next": nxt, "error": "give a user name and a password"}
        return web.render(request, "login.html", context, 400)
    pod = web.pod(request)
    scram, hashed = await asyncio.gather(
        pod.batcher.call("HGET", pod.keys.users_scram, user),
        pod.batcher.call("HGET", pod.keys.users, user),
    )
    ok = await anyio.to_thread.run_sync(
        password_matches,
        password,
        None if scram is None else codec.to_str(scram),
        None if hashed is None else codec.to_str(hashed),
    )
    if not ok:
        context = {"next": nxt, "error": "wrong user name or password"}
        return web.render(request, "login.html", context, 401)
    request.session.clear()  # a new session for the signed-in user (and a new form token)
    request.session[web.USER] = user
    return RedirectResponse(nxt, status_code=303)


async def logout(request: Request) -> Response:
    await web.form(request)
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


async def acls(request: Request) -> Response:
    await web.require(request, Operation.DESCRIBE, CLUSTER, web.CLUSTER)
    pod = web.pod(request)
    bindings = await AclStore(pod.batcher, pod.keys).load()
    context = {"bindings": bindings, "enforced": pod.authorizer.enabled}
    return web.render(request, "acls.html", context)


async def quotas(request: Request) -> Response:
    await web.require(request, Operation.DESCRIBE_CONFIGS, CLUSTER, web.CLUSTER)
    pod = web.pod(request)
    found = parse_quotas(await pod.batcher.call("HGETALL", pod.keys.client_quotas))
    rows = sorted(
        (describe_entity(entity), sorted(values.items())) for entity, values in found.items()
    )
    return web.render(request, "quotas.html", {"rows": rows})
