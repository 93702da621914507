"""Can `outlive serve` listen where it was asked to, and if not, why: checked before it creates
a database or a key, so a second `make run` says who holds the port instead of failing after
half a start.

Who holds a port is read from Linux's /proc: the listening socket's inode in /proc/net/tcp
(and tcp6), then the process whose /proc/<pid>/fd links to `socket:[inode]`. Processes of
other users cannot be inspected; the message then names the port and a command that can.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

__all__ = ["port_holders", "port_problem"]

_LISTEN = "0A"


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _command(pid: str, proc: Path) -> str:
    try:
        raw = (proc / pid / "cmdline").read_bytes()
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    text = " ".join(" ".join(words).split()) or "?"
    return text if len(text) <= 120 else text[:119] + "…"


def port_holders(port: int, proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command line) of each process this user can see listening on TCP `port`."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port, proc)}
    if not wanted:
        return []
    found: list[tuple[int, str]] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (entry / "fd").iterdir()}
        except OSError:  # gone, or another user's
            continue
        if links & wanted:
            found.append((int(entry.name), _command(entry.name, proc)))
    return sorted(found)


def _bind_error(host: str, port: int) -> OSError | None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            sock.bind(address)
        except OSError as exc:
            return exc
    return None


def port_problem(host: str, port: int) -> str | None:
    """None when `host:port` can be listened on; else a sentence saying why not and what to
    do."""
    exc = _bind_error(host, port)
    if exc is None:
        return None
    where = f"{host}:{port}"
    if isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: unknown host {host!r} ({exc.strerror})"
    if exc.errno == errno.EADDRINUSE:
        holders = port_holders(port)
        if holders:
            who = "; ".join(f"pid {pid} ({cmd})" for pid, cmd in holders)
            return (f"port {port} is already in use on {host}, by {who}; stop it, or pass "
                    f"--port to serve on another port")
        return (f"port {port} is already in use on {host} (by a process this user cannot "
                f"inspect; `ss -ltnp 'sport = :{port}'` as root shows it); stop it, or pass "
                f"--port to serve on another port")
    if exc.errno == errno.EACCES:
        return f"not allowed to listen on {where} (ports below 1024 need privileges); " \
               "pass --port 8765 or another port above 1023"
    return f"cannot listen on {where}: {exc.strerror or exc}"
