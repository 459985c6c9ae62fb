"""What every page shares: the templates, the deployment's parts, the signed-in principal
and its authorization (the pods' rules: adapter/authorizer.py), forms with their CSRF token,
and refusals as pages with a message (``Refusal``), never a traceback."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from adapter.console.decoding import shown, utc_time
from adapter.console.sampler import Sampler
from adapter.pod import Pod
from mapping.connection.cluster import SyncClient
from mapping.security.acls import Operation, ResourceType

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["shown"] = shown
templates.env.filters["utc"] = utc_time
templates.env.globals["quote"] = lambda text: quote(str(text), safe="")
CLUSTER = "kafka-cluster"  # the name of Kafka's one CLUSTER resource
ANONYMOUS = "User:ANONYMOUS"
USER = "user"  # the session's signed-in user
CSRF = "csrf"  # the session's form token, and the forms' field


@dataclass
class Console:
    """The console's parts, made at start (app.py)."""

    pod: Pod
    sampler: Sampler
    sync_client: SyncClient  # for the synchronous read views (run in a thread)
    redis_at: str  # the deployment's Redis, its password redacted


class Refusal(Exception):
    """A request refused with a message for the person (an HTTP 4xx page)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class LoginRequired(Exception):
    """Users are on and nobody is signed in: the login page."""


def console(request: Request) -> Console:
    return request.app.state.console


def pod(request: Request) -> Pod:
    return console(request).pod


async def users_on(request: Request) -> bool:
    """Whether the deployment has users (``adapter user add``, Kafka's SCRAM users): then
    every page needs a login."""
    keys, batcher = pod(request).keys, pod(request).batcher
    counts = await asyncio.gather(
        batcher.call("EXISTS", keys.users), batcher.call("EXISTS", keys.users_scram)
    )
    return any(int(c) for c in counts)


async def principal(request: Request) -> str:
    """The principal the request acts as: the signed-in user, or ANONYMOUS without users;
    ``LoginRequired`` when users are on and nobody is signed in."""
    user = request.session.get(USER)
    if await users_on(request):
        if not user:
            raise LoginRequired
        return f"User:{user}"
    return ANONYMOUS


def host_of(request: Request) -> str:
    return request.client.host if request.client is not None else ""


async def allowed(
    request: Request, operation: Operation, resource: ResourceType, name: str
) -> bool:
    who = await principal(request)
    return pod(request).authorizer.allows(who, host_of(request), operation, resource, name)


async def require(
    request: Request, operation: Operation, resource: ResourceType, name: str
) -> None:
    """Refuse (403) unless the principal may ``operation`` the resource, as a pod would."""
    if not await allowed(request, operation, resource, name):
        what = resource.name.lower().replace("_", " ")
        raise Refusal(403, f"not authorized: {operation.name} on {what} {name!r} is not allowed")


def csrf_token(request: Request) -> str:
    token = request.session.get(CSRF)
    if not token:
        token = request.session[CSRF] = secrets.token_urlsafe(24)
    return token


async def form(request: Request) -> FormData:
    """A POSTed form whose CSRF token is the session's (403 otherwise)."""
    data = await request.form()
    given = data.get(CSRF)
    expected = request.session.get(CSRF)
    if not expected or not isinstance(given, str) or not secrets.compare_digest(given, expected):
        raise Refusal(403, "the form has expired or did not come from this console: reload it")
    return data


def field(data: Any, name: str, default: str = "") -> str:
    value = data.get(name, default)
    return value if isinstance(value, str) else default


def integer(text: str, what: str, *, low: int = 0, high: int | None = None) -> int:
    """``text`` as an integer in [low, high], else a 400 saying so."""
    try:
        value = int(text.strip())
    except ValueError:
        raise Refusal(400, f"{what} must be a whole number, not {text!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise Refusal(400, f"{what} must be {bound}, not {value}")
    return value


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    # (a 500 page is made outside the session middleware: no session there)
    has_session = "session" in request.scope
    return templates.TemplateResponse(
        request,
        template,
        {
            "user": request.session.get(USER) if has_session else None,
            "csrf": csrf_token(request) if has_session else "",
            **context,
        },
        status_code=status,
    )
