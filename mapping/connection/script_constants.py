"""The constants the Lua scripts read as ``K.<NAME>``, taken from their Python definitions so
that the two sides cannot disagree: the loader (mapping/connection/scripts.py) prepends to each
script
one table ``local K = {...}`` holding only the names that script uses.
"""

from __future__ import annotations

from mapping.core import errors, kafka_errors, records, size_marks

# Not errors: the kafka_group scripts answer these in the error code's place.
WAIT = -1  # wait (pub/sub, or the ms the reply names) and check again (lib/kgroup.lua)
NEED_TARGET = -2  # compute the target assignment and store it (lib/kconsumer.lua)
# a classic request to a consumer group: the pod serves it as one of its members (lib/kmixed.lua)
CONSUMER_GROUP = -3

LUA_CONSTANTS: dict[str, int | str] = {
    # Kafka's error codes, by Kafka's names (K.UNKNOWN_MEMBER_ID)
    **{name: code for code, name in kafka_errors.NAMES.items()},
    # the V1 error codes a script may raise as "<CODE> <message>" (K.V1_NOT_LEADER): only
    # those errors.from_script_error turns back into a BrokerError
    **{f"V1_{code}": code for code in errors.SCRIPT_CODES},
    "WAIT": WAIT,
    "NEED_TARGET": NEED_TARGET,
    "CONSUMER_GROUP": CONSUMER_GROUP,
    # the value size marks' range of k in 'size.<k>'
    "SIZE_MIN_BITS": size_marks.SIZE_MIN_BITS,
    "SIZE_MAX_BITS": size_marks.SIZE_MAX_BITS,
    # a record's short forms in kafka/produce.lua's arguments, compared with ARGV: text
    "SHORT_NULL_KEY": str(records.SHORT_NULL_KEY),
    "SHORT_KEY_VALUE": str(records.SHORT_KEY_VALUE),
    "RAW_BATCH": str(records.RAW_BATCH),
}
