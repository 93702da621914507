"""A multi-host test bed on one machine: every "host" is a network namespace made by the test,
joined to the root namespace by a veth pair, and reaching PostgreSQL only through a real TCP
proxy (tests/support/tcpproxy.py) that the test controls.

    root namespace                             namespace olt<pid>-<n>  ("host" n)
    PostgreSQL 127.0.0.1:5432  <- TcpProxy on 10.213.x.1:P  <-veth->  10.213.x.2
                                                                      outlive worker / serve

Each link is a /30 in 10.213.0.0/16 (chosen free under a machine-wide lock, so two pytest
processes never pick the same one). A process in a host knows the database only as
`10.213.x.1:P`, so what the proxy does is what its network does:

* `Host.delay(up, down)`: latency per direction (this kernel has no `netem`);
* `Host.stall()`: nothing gets through either way, every socket stays open (a partition whose
  packets vanish: only timeouts notice, and bytes in flight arrive after `heal()`);
* `Host.drop()`: every open connection is reset once; new ones work (a blip);
* `Host.cut()`: open connections reset and new ones refused until `heal()` (a partition that
  the host sees as errors).

API hosts listen on their namespace address (`Host.addr`), which the test process reaches
straight over the veth; only the database link has a proxy.

Root only (namespaces need CAP_NET_ADMIN): `require_root()` skips a test with the reason, or
fails it under `CI=true`, where skipping would hide the partition tests. Namespaces, veths and
proxies go in `TestBed.close()`, also when the test failed; namespaces left by a killed test
run (their pid in the name is gone) are removed by the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.processes import (
    LoggedProcess,
    ServeProcess,
    WorkerProcess,
    child_env,
    postgres_url,
)
from tests.support.tcpproxy import TcpProxy

__all__ = ["Host", "TestBed", "require_root"]

_LOCK = Path("/tmp/outlive-testbed.lock")
_NET = ipaddress.IPv4Network("10.213.0.0/16")
_NS = re.compile(r"^olt(\d+)-\d+\b")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def require_root(needs: str = "the multi-host test bed") -> None:
    """Skip (or, under CI=true, fail) unless this process can make network namespaces and
    links (CAP_NET_ADMIN); `needs`: what the test does with them, for the message."""
    import pytest

    ci = os.environ.get("CI", "").lower() == "true"
    why = None
    if os.geteuid() != 0:
        why = f"{needs} needs root (ip netns, veth)"
    else:
        probe = f"olt{os.getpid()}-probe"
        done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if done.returncode != 0:
            why = f"`ip netns add` failed: {done.stderr.strip()}"
        else:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if why is not None:
        if ci:
            pytest.fail(f"CI=true but {why}: {needs} must run in CI", pytrace=False)
        pytest.skip(why)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _reap_stale() -> None:
    """Namespaces whose test process is gone (killed before its teardown)."""
    for line in _ip("netns", "list").stdout.splitlines():
        m = _NS.match(line)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _ip("netns", "del", line.split()[0], check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    used = [ipaddress.ip_interface(w).network for line in
            _ip("-o", "-4", "addr").stdout.splitlines()
            for w in line.split() if "/" in w and w[0].isdigit()]
    for net in _NET.subnets(new_prefix=30):
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free /30 left in {_NET}")


class Host:
    """One namespace, its veth link and the proxy on its database link."""

    def __init__(self, bed: TestBed, index: int, name: str, net: ipaddress.IPv4Network,
                 proxy: TcpProxy) -> None:
        self.bed = bed
        self.name = name
        self.ns = f"olt{os.getpid()}-{index}"
        self.veth = f"olt{bed.tag}{index}"
        hosts = list(net.hosts())
        self.root_addr = str(hosts[0])
        self.addr = str(hosts[1])
        self.proxy = proxy
        self.processes: list[LoggedProcess] = []

    @property
    def db_url(self) -> str:
        """The test database as this host reaches it: through its proxy."""
        items = conninfo_to_dict(self.bed.dsn)
        items.update(host=self.root_addr, port=str(self.proxy.port))
        return postgres_url(make_conninfo("", **{k: str(v) for k, v in items.items()}))

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host (`ip netns exec` execs it: the pid is the process's)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    # -- the link ----------------------------------------------------------------------------

    def delay(self, up: float, down: float | None = None) -> None:
        """Seconds added to each chunk towards the database (`up`) and back (`down`)."""
        self.proxy.delay_up = up
        self.proxy.delay_down = up if down is None else down

    def stall(self) -> None:
        self.proxy.stall()

    def drop(self) -> None:
        self.proxy.cut()  # TcpProxy.cut: reset the open connections once

    def cut(self) -> None:
        self.proxy.drop()  # TcpProxy.drop: reset them and refuse new ones until heal()

    def heal(self) -> None:
        self.proxy.heal()

    async def end_stalled_transactions(self) -> int:
        """End this host's server sessions that sit inside a transaction (how many): what
        the server's TCP keepalives do to a peer lost mid-transaction in a real partition.
        Through the proxy they never fire (the proxy, alive, answers them), so a stall that
        split a write's flush, BEGIN and an UPDATE delivered and the COMMIT held, would hold
        that session row's lock, and block every takeover, until `heal()`."""
        ports = self.proxy.upstream_ports()
        if not ports:
            return 0
        async with await psycopg.AsyncConnection.connect(self.bed.dsn, autocommit=True) as c:
            cur = await c.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND client_port = ANY(%s) "
                "AND xact_start IS NOT NULL AND pid <> pg_backend_pid()", (ports,))
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    # -- processes ---------------------------------------------------------------------------

    def worker(self, *args: str, speed: float = 10.0, lease_ttl: float = 2.0,
               heartbeat: float = 0.5, **env: str) -> WorkerProcess:
        """`outlive worker` in this host, on the database through its proxy (not yet ready:
        await `.ready()`)."""
        proc = WorkerProcess(self.db_url, "--lease-ttl", f"{lease_ttl:g}", "--heartbeat",
                             f"{heartbeat:g}", *args, log_dir=self.bed.log_dir,
                             name=self.name, speed=speed, env=child_env(**env),
                             wrap=self.argv)
        self.processes.append(proc)
        return proc

    def api(self, *args: str, **env: str) -> ServeProcess:
        """`outlive serve --no-worker` in this host, listening on its address (`.url`)."""
        d = self.bed.log_dir / self.name
        d.mkdir(exist_ok=True)
        proc = ServeProcess(d, self.name, "--no-worker", "--host", self.addr, *args,
                            db=self.db_url, key_file=d / "serve.key", env=child_env(**env),
                            wrap=self.argv, host=self.addr)
        self.processes.append(proc)
        return proc


class TestBed:
    """Hosts on one PostgreSQL database (`dsn`, in the root namespace). `close()` (awaited,
    also after a failure) reaps their processes and removes proxies, veths and namespaces."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, dsn: str, log_dir: Path) -> None:
        self.dsn = dsn
        self.log_dir = log_dir
        self.tag = uuid.uuid4().hex[:6]
        self.hosts: list[Host] = []

    async def host(self, name: str) -> Host:
        """A new namespace with its link and its database proxy, running."""
        db = conninfo_to_dict(self.dsn)
        index = len(self.hosts)
        with _locked():
            if not self.hosts:
                _reap_stale()
            net = _free_subnet()
            root, ns_side = (str(a) for a in list(net.hosts())[:2])
            ns = f"olt{os.getpid()}-{index}"
            veth = f"olt{self.tag}{index}"
            _ip("netns", "add", ns)
            try:
                _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}n")
                _ip("link", "set", f"{veth}n", "netns", ns)
                _ip("addr", "add", f"{root}/30", "dev", veth)
                _ip("link", "set", veth, "up")
                _ip("-n", ns, "addr", "add", f"{ns_side}/30", "dev", f"{veth}n")
                _ip("-n", ns, "link", "set", f"{veth}n", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            except BaseException:
                _ip("link", "del", veth, check=False)
                _ip("netns", "del", ns, check=False)
                raise
        proxy = TcpProxy(int(db.get("port") or 5432), str(db.get("host") or "127.0.0.1"),
                         listen_host=root)
        host = Host(self, index, name, net, proxy)
        self.hosts.append(host)
        await proxy.start()
        return host

    def processes(self) -> list[LoggedProcess]:
        return [p for h in self.hosts for p in h.processes]

    def logs(self) -> str:
        return "\n".join(p.report() for p in self.processes())

    async def close(self) -> None:
        for p in self.processes():
            p.reap()
        for h in self.hosts:
            with contextlib.suppress(Exception):
                await h.proxy.close()
            _ip("link", "del", h.veth, check=False)
            _ip("netns", "del", h.ns, check=False)
        self.hosts.clear()

