"""A real MIT Kerberos KDC for the GSSAPI tests: its own realm, database and port in a
temporary folder, started as a child process (``krb5kdc -n``), with keytabs made by
``kadmin.local``. Clients and pods find it through ``KRB5_CONFIG`` (``Kdc.env``;
``realm_env`` sets it in this process, whose children, the pods, inherit it). Skips when
Debian's krb5-kdc / krb5-admin-server are not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mapping.connection.embedded import free_port

REALM = "ADAPTER.TEST"
# where the tools live on Debian (/usr/sbin is not on every PATH)
_SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"])


def _tool(name: str) -> str | None:
    return shutil.which(name, path=_SEARCH)


@dataclass(frozen=True)
class Kdc:
    folder: Path
    port: int

    @property
    def krb5_conf(self) -> Path:
        return self.folder / "krb5.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to use this realm (its own credentials cache apart)."""
        return {
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_KDC_PROFILE": str(self.folder / "kdc.conf"),
            "KRB5RCACHETYPE": "none",  # no replay cache file shared between the tests' pods
        }

    def admin(self, query: str) -> None:
        subprocess.run(
            [_tool("kadmin.local") or "kadmin.local", "-r", REALM, "-q", query],
            env={**os.environ, **self.env},
            check=True,
            capture_output=True,
        )

    def keytab(self, principal: str, name: str) -> Path:
        """A keytab holding ``principal`` (made with a random key the first time)."""
        path = self.folder / f"{name}.keytab"
        self.admin(f"addprinc -randkey {principal}")
        self.admin(f"ktadd -k {path} {principal}")
        return path

    def kinit(self, principal: str, keytab: Path, cache: Path) -> dict[str, str]:
        """Gets ``principal`` a ticket into ``cache``; the environment to use it."""
        env = {**self.env, "KRB5CCNAME": f"FILE:{cache}"}
        subprocess.run(
            [_tool("kinit") or "kinit", "-k", "-t", str(keytab), principal],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        return env


def log_in(kdc: Kdc, principal: str) -> dict[str, str]:
    """A ticket for ``principal`` (its keytab and cache its own), made this process's
    credentials cache; the environment that uses it."""
    name = principal.replace("/", "_")
    env = kdc.kinit(principal, kdc.keytab(principal, name), kdc.folder / f"{name}.ccache")
    os.environ.update(env)
    return env


def _write_configs(folder: Path, port: int) -> None:
    (folder / "krb5.conf").write_text(
        f"""[libdefaults]
  default_realm = {REALM}
  dns_lookup_realm = false
  dns_lookup_kdc = false
  rdns = false
  dns_canonicalize_hostname = false
  udp_preference_limit = 1
[realms]
  {REALM} = {{
    kdc = 127.0.0.1:{port}
  }}
[domain_realm]
  127.0.0.1 = {REALM}
  localhost = {REALM}
"""
    )
    (folder / "kdc.conf").write_text(
        f"""[kdcdefaults]
  kdc_ports = {port}
  kdc_tcp_ports = {port}
[realms]
  {REALM} = {{
    database_name = {folder}/principal
    acl_file = {folder}/kadm5.acl
    key_stash_file = {folder}/stash
    kdc_ports = {port}
    kdc_tcp_ports = {port}
    max_life = 1h
    supported_enctypes = aes256-cts:normal aes128-cts:normal
  }}
[logging]
  kdc = FILE:{folder}/kdc.log
"""
    )
    (folder / "kadm5.acl").write_text("")


@contextmanager
def running_kdc(folder: Path) -> Iterator[Kdc]:
    tools = {name: _tool(name) for name in ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"no MIT Kerberos tools ({', '.join(missing)}): tools/bootstrap.sh test")
    port = free_port()
    _write_configs(folder, port)
    kdc = Kdc(folder, port)
    env = {**os.environ, **kdc.env}
    subprocess.run(
        [str(tools["kdb5_util"]), "create", "-s", "-r", REALM, "-P", "master-key"],
        env=env,
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [str(tools["krb5kdc"]), "-n", "-r", REALM],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(kdc)
        yield kdc
    finally:
        server.terminate()
        server.wait(10)


def _wait_for(kdc: Kdc) -> None:
    """Until the KDC answers: a ticket for a throwaway principal."""
    keytab = kdc.keytab("probe", "probe")
    deadline = time.monotonic() + 20
    while True:
        try:
            kdc.kinit("probe", keytab, kdc.folder / "probe.ccache")
            return
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def realm_env(kdc: Kdc) -> Iterator[None]:
    """This process (and the pods it starts) in ``kdc``'s realm, its credentials cache
    whatever ``Kdc.kinit`` last put in ``KRB5CCNAME``; the environment as it was after."""
    saved = {name: os.environ.get(name) for name in (*kdc.env, "KRB5CCNAME")}
    os.environ.update(kdc.env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
