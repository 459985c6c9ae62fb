"""What each V1 command needs under ``--authorizer``: Kafka's operations on Kafka's
resources, so one set of ACL bindings governs both front doors (docs/security.md, "What each
request needs"). Checked before the command's handler runs; a denial answers
``ERR|NOT_AUTHORIZED|...`` and the connection stays usable."""

from __future__ import annotations

from adapter.v1.handlers import Context
from mapping.core.errors import NOT_AUTHORIZED, BrokerError
from mapping.security.acls import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER

# command -> (operation, resource type, the argument naming the resource; None: the cluster)
NEEDS: dict[str, tuple[tuple[Operation, ResourceType, int | None], ...]] = {
    "PING": (),
    "PRODUCE": ((Operation.WRITE, TOPIC, 0),),
    "CONSUME": ((Operation.READ, TOPIC, 0),),
    "JOIN": ((Operation.READ, GROUP, 0),),
    "SYNC": ((Operation.READ, GROUP, 0),),
    "HEARTBEAT": ((Operation.READ, GROUP, 0),),
    "LEAVE": ((Operation.READ, GROUP, 0),),
    "COMMIT": ((Operation.READ, GROUP, 0), (Operation.READ, TOPIC, 1)),  # as OffsetCommit
    "OFFSET": ((Operation.DESCRIBE, GROUP, 0), (Operation.DESCRIBE, TOPIC, 1)),  # OffsetFetch
    # as ShareGroupHeartbeat with ShareFetch / ShareAcknowledge (READ implies DESCRIBE)
    "SHARE_ACQUIRE": ((Operation.READ, GROUP, 0), (Operation.READ, TOPIC, 1)),
    "SHARE_ACK": ((Operation.READ, GROUP, 0), (Operation.READ, TOPIC, 1)),
    "SHARE_LEAVE": ((Operation.READ, GROUP, 0),),  # a leaving ShareGroupHeartbeat
    "SET_PARTITION_ROLE": ((Operation.ALTER, CLUSTER, None),),
    "REPLICA_FETCH": ((Operation.CLUSTER_ACTION, CLUSTER, None),),  # Kafka's follower fetch
}
# any other command: an administrator's
ADMIN: tuple[tuple[Operation, ResourceType, int | None], ...] = ((Operation.ALTER, CLUSTER, None),)


def principal_of(user: str | None) -> str:
    """The principal of a connection's AUTH user (anonymous without one)."""
    return f"User:{user}" if user is not None else ANONYMOUS


def refusal(
    context: Context, command: str, argv: list[str], principal: str, host: str
) -> BrokerError | None:
    """None when ``principal`` may run the command; else its NOT_AUTHORIZED error. A missing
    argument is left to the handler (BAD_REQUEST)."""
    authorizer = context.authorizer
    for operation, resource_type, at in NEEDS.get(command, ADMIN):
        if at is None:
            name = CLUSTER_NAME
        elif at < len(argv):
            name = argv[at]
        else:
            continue
        if not authorizer.allows(principal, host, operation, resource_type, name):
            what = resource_type.name.lower()
            return BrokerError(
                NOT_AUTHORIZED, f"{principal} may not {operation.name} {what} {name}"
            )
    return None
