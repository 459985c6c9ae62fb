"""Kafka's DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) over the
pod's users (the ones ``adapter user`` manages, mapping/security/auth.py), with Kafka's
answers (ScramImage.describe, ScramControlManager.alterCredentials):

- Describe lists every user with SCRAM secrets (or the named ones) with each mechanism's
  iteration count; a named user without any: RESOURCE_NOT_FOUND; named twice:
  DUPLICATE_RESOURCE. The users are those the pod's SASL gate checks: the ``--auth-file``
  ones first (its lines as the file stands), then Redis' (``--auth-redis``).
- Alter sets or deletes one mechanism's secret per user. The client sends the salted
  password (never the password): StoredKey and ServerKey are derived from it, as a
  Kafka broker does, and stored in the encoding ``adapter user add`` uses. Only a pod
  started with ``--auth-redis`` changes users, and never one of its ``--auth-file``
  (that file takes precedence at login): POLICY_VIOLATION otherwise. A user's PLAIN
  password hash is left as it is (docs/security.md, "Users through Kafka's admin APIs").

Both need DESCRIBE / ALTER on the cluster when the authorizer is on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio.to_thread

from adapter.kafka import errors
from adapter.kafka.authorization import CLUSTER, DENIED, allowed
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from mapping.core.codec import to_str
from mapping.core.errors import BrokerError
from mapping.core.keys import is_valid_name
from mapping.security.acls import CLUSTER_NAME, Operation
from mapping.security.auth import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MECHANISM_CODES,
    SCRAM_MIN_ITERATIONS,
    CredentialsError,
    FileUsers,
    load_auth_file_users,
    parse_scram_secrets,
    scram_secret_from_salted,
    users_scram_alter_call,
)

# the SASL gate's SCRAM server (scramp) refuses shorter salts; clients send 16 or more
MIN_SALT_BYTES = 12
MECHANISMS_BY_CODE = {code: name for name, code in SCRAM_MECHANISM_CODES.items()}
DUPLICATE_ALTER = "A user credential cannot be altered twice in the same request"
DUPLICATE_DESCRIBE = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
NOT_FOUND_DESCRIBE = "Attempt to describe a user credential that does not exist: "
NOT_FOUND_DELETE = "Attempt to delete a user credential that does not exist"
READ_ONLY = (
    "users are read-only on this broker: it reads them from --auth-file only "
    "(start pods with --auth-redis to manage users through Kafka's admin APIs)"
)
IN_FILE = "user {} is defined in --auth-file, which takes precedence over Redis' users"


async def _file_users(context: KafkaContext) -> FileUsers | None:
    path: Path | None = context.pod.settings.auth_file
    if path is None:
        return None
    # read again here (the pod read it at start): small, and only on an admin request
    return await anyio.to_thread.run_sync(load_auth_file_users, path)


async def _secrets(context: KafkaContext, names: list[str] | None) -> dict[str, str]:
    """``{user: encoded SCRAM secrets}`` as the SASL gate sees them (adapter/auth.py): a
    file user's line wins over Redis'; ``names`` None: every user."""
    found: dict[str, str] = {}
    pod = context.pod
    if pod.settings.auth_redis:
        key = pod.keys.users_scram
        if names is None:
            flat = await pod.batcher.call("HGETALL", key)
            pairs = (
                flat.items() if isinstance(flat, dict) else zip(flat[::2], flat[1::2], strict=True)
            )
            found = {to_str(user): to_str(value) for user, value in pairs}
        elif names:
            values = await pod.batcher.call("HMGET", key, *names)
            found = {n: to_str(v) for n, v in zip(names, values, strict=True) if v is not None}
    file_users = await _file_users(context)
    if file_users is not None:
        for user in file_users.hashes:
            found.pop(user, None)
            if user in file_users.scram and (names is None or user in names):
                found[user] = file_users.scram[user]
    return found


async def describe_user_scram_credentials(context: KafkaContext, request: Request) -> Any:
    response = DESCRIBE_USER_SCRAM_CREDENTIALS.response
    Result = response.DescribeUserScramCredentialsResult
    Info = Result.CredentialInfo
    if not await allowed(context, request, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return response[request.version](
            throttle_time_ms=0, error_code=DENIED[CLUSTER],
            error_message="Cluster authorization failed.", results=[],
        )  # fmt: skip
    asked = [u.name for u in request.body.users or ()]
    try:
        stored = await _secrets(context, sorted(set(asked)) if asked else None)
    except (BrokerError, CredentialsError, OSError) as exc:
        code = error_of(exc) if isinstance(exc, BrokerError) else errors.UNKNOWN_SERVER_ERROR
        return response[request.version](
            throttle_time_ms=0, error_code=code, error_message=str(exc), results=[]
        )
    results = []
    for user in dict.fromkeys(asked) if asked else sorted(stored):
        if asked.count(user) > 1:
            failed = errors.DUPLICATE_RESOURCE, DUPLICATE_DESCRIBE + user
            results.append(Result(user=user, error_code=failed[0], error_message=failed[1],
                                  credential_infos=[]))  # fmt: skip
            continue
        try:
            secrets = parse_scram_secrets(stored[user]) if user in stored else {}
        except CredentialsError:
            secrets = {}  # unreadable: the gate refuses it too
        if not secrets:
            failed = errors.RESOURCE_NOT_FOUND, NOT_FOUND_DESCRIBE + user
            results.append(Result(user=user, error_code=failed[0], error_message=failed[1],
                                  credential_infos=[]))  # fmt: skip
            continue
        infos = [
            Info(mechanism=SCRAM_MECHANISM_CODES[m], iterations=secrets[m].iterations)
            for m in sorted(secrets, key=SCRAM_MECHANISM_CODES.__getitem__)
        ]
        results.append(
            Result(user=user, error_code=errors.NONE, error_message=None, credential_infos=infos)
        )
    return response[request.version](
        throttle_time_ms=0, error_code=errors.NONE, error_message=None, results=results
    )


def _check(name: str, mechanism: int) -> tuple[int, str] | None:
    """Kafka's validateScramUsernameAndMechanism, with the user names ``adapter user``
    takes."""
    if not name:
        return errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if not is_valid_name(name):
        return errors.UNACCEPTABLE_CREDENTIAL, "user names are 1-249 characters of [A-Za-z0-9._-]"
    if mechanism not in MECHANISMS_BY_CODE:
        return errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _check_upsertion(upsertion: Any) -> tuple[int, str] | None:
    refused = _check(upsertion.name, upsertion.mechanism)
    if refused is not None:
        return refused
    if upsertion.iterations < SCRAM_MIN_ITERATIONS:
        return errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > SCRAM_MAX_ITERATIONS:
        return errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salt or not upsertion.salted_password:
        return errors.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    if len(upsertion.salt) < MIN_SALT_BYTES:
        return errors.UNACCEPTABLE_CREDENTIAL, f"Salt must be at least {MIN_SALT_BYTES} bytes"
    return None


async def alter_user_scram_credentials(context: KafkaContext, request: Request) -> Any:
    response = ALTER_USER_SCRAM_CREDENTIALS.response
    Result = response.AlterUserScramCredentialsResult
    body = request.body
    deletions, upsertions = list(body.deletions or ()), list(body.upsertions or ())
    users = sorted({c.name for c in (*deletions, *upsertions)})
    if not await allowed(context, request, Operation.ALTER, CLUSTER, CLUSTER_NAME):
        message = "Cluster authorization failed."
        results = [Result(user=u, error_code=DENIED[CLUSTER], error_message=message) for u in users]
        return response[request.version](throttle_time_ms=0, results=results)
    # ScramControlManager.alterCredentials: one change per user; a user named twice is
    # refused whole (DUPLICATE_RESOURCE), as is one whose change does not validate
    refused: dict[str, tuple[int, str]] = {}
    changes: dict[str, Any] = {}
    for change, check in (
        *((d, _check(d.name, d.mechanism)) for d in deletions),
        *((u, _check_upsertion(u)) for u in upsertions),
    ):
        if change.name in refused:
            continue
        if changes.pop(change.name, None) is not None:
            refused[change.name] = errors.DUPLICATE_RESOURCE, DUPLICATE_ALTER
        elif check is not None:
            refused[change.name] = check
        else:
            changes[change.name] = change
    if changes:
        await _refuse_unmanaged(context, changes, refused)
    outcomes = await asyncio.gather(*(_apply(context, c) for c in changes.values()))
    for name, outcome in zip(changes, outcomes, strict=True):
        if outcome is not None:
            refused[name] = outcome
    results = [
        Result(user=u, error_code=refused[u][0], error_message=refused[u][1])
        if u in refused
        else Result(user=u, error_code=errors.NONE, error_message=None)
        for u in users
    ]
    return response[request.version](throttle_time_ms=0, results=results)


async def _refuse_unmanaged(
    context: KafkaContext, changes: dict[str, Any], refused: dict[str, tuple[int, str]]
) -> None:
    """Moves to ``refused`` the changes this pod may not make: every one without
    ``--auth-redis``, and those of ``--auth-file``'s users (which shadow Redis' at login)."""
    if not context.pod.settings.auth_redis:
        for name in list(changes):
            refused[name] = errors.POLICY_VIOLATION, READ_ONLY
            del changes[name]
        return
    try:
        file_users = await _file_users(context)
    except (OSError, CredentialsError) as exc:
        file_users = None
        for name in list(changes):
            refused[name] = errors.UNKNOWN_SERVER_ERROR, f"--auth-file: {exc}"
            del changes[name]
    if file_users is not None:
        for name in [n for n in changes if n in file_users.hashes]:
            refused[name] = errors.POLICY_VIOLATION, IN_FILE.format(name)
            del changes[name]


async def _apply(context: KafkaContext, change: Any) -> tuple[int, str] | None:
    """Stores one user's change (users/scram_alter.lua); the refusal, or None."""
    mechanism = MECHANISMS_BY_CODE[change.mechanism]
    secret = ""
    if hasattr(change, "salted_password"):  # an upsertion
        secret = scram_secret_from_salted(
            mechanism, change.iterations, change.salt, change.salted_password
        )
    call = users_scram_alter_call(context.pod.keys, change.name, mechanism, secret)
    try:
        done = await context.pod.batcher.call(*call)
    except BrokerError as exc:
        return error_of(exc), str(exc)
    if not int(done):
        return errors.RESOURCE_NOT_FOUND, NOT_FOUND_DELETE
    return None
