"""``adapter quota set|show|remove`` against a real Redis: quotas stored as the Kafka admin
APIs store them (one hash field per entity and key), each change announced to the pods, and
a bad value refused in one line with nothing stored."""

from __future__ import annotations

import redis

from mapping.security.quotas import parse_quotas
from tests.support.cli import CliTarget

ABOVE_0 = "must be greater than 0"


def test_set_show_and_remove(redis_url: str, redis_client: redis.Redis) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "quota")
    altered = target.announced(
        target.keys.client_quotas_changed_channel,
        "quota", "set", "--user", "alice", "--client-id", "app",
        "--producer-byte-rate", "1048576", "--consumer-byte-rate", "2048",
    )  # fmt: skip
    assert altered == "altered client-id=app,user=alice\n"
    target.cli("quota", "set", "--user-default", "--request-percentage", "50")
    # a second change of the entity keeps the values it does not name
    target.cli(
        "quota", "set", "--user", "alice", "--client-id", "app", "--producer-byte-rate", "4096"
    )
    stored = parse_quotas(redis_client.hgetall(target.keys.client_quotas))
    assert stored == {
        (("client-id", "app"), ("user", "alice")): {
            "producer_byte_rate": 4096.0,
            "consumer_byte_rate": 2048.0,
        },
        (("user", None),): {"request_percentage": 50.0},
    }
    assert target.cli("quota", "show").splitlines() == [
        "client-id=app,user=alice consumer_byte_rate=2048 producer_byte_rate=4096",
        "user=<default> request_percentage=50",
    ]
    target.cli(
        "quota", "remove", "--user", "alice", "--client-id", "app", "--key", "consumer_byte_rate"
    )
    target.cli("quota", "remove", "--user-default", "--key", "request_percentage")
    assert target.cli("quota", "show") == "client-id=app,user=alice producer_byte_rate=4096\n"
    assert redis_client.hlen(target.keys.client_quotas) == 1


def test_bad_values_are_refused_in_one_line(redis_url: str, redis_client: redis.Redis) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "quota")
    for args, message in [
        (["--user", "bob", "--producer-byte-rate", "0"], f"Quota producer_byte_rate {ABOVE_0}"),
        (["--user", "bob", "--consumer-byte-rate", "-5"], f"Quota consumer_byte_rate {ABOVE_0}"),
        (["--user", "bob", "--producer-byte-rate", "fast"], "'fast' is not a valid integer"),
        (["--user", "bob", "--request-percentage", "nan"], f"Quota request_percentage {ABOVE_0}"),
        (["--producer-byte-rate", "100"], "Invalid empty client quota entity"),
        (["--user", "", "--producer-byte-rate", "100"], "Empty user not supported"),
        (["--user", "bob"], "nothing to change"),
    ]:  # fmt: skip
        error = target.refused_in_one_line("quota", "set", *args)
        assert message in error, error
    assert not redis_client.exists(target.keys.client_quotas)
