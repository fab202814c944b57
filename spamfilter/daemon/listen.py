"""Where a daemon listens, and who may connect: the sockets of ``spamfilter
serve`` and ``spamfilter milter``, written once for both.

A Unix socket is created with no access for anyone but the daemon's user
and only then given its mode and group, so there is no moment at which
another user could connect; a socket file left behind by a daemon that is
gone is replaced, one a live server answers on is not. Over TCP only
loopback clients are served unless the allowed networks are named, and a
daemon that would listen on another address without them refuses to start.
"""

from __future__ import annotations

import grp
import os
import socket
import stat
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network

from spamfilter import spamd
from spamfilter.config import is_loopback
from spamfilter.errors import ConfigError

Network = IPv4Network | IPv6Network
LOOPBACK: tuple[Network, ...] = (ip_network("127.0.0.0/8"), ip_network("::1/128"))


def allowed_networks(allowed: tuple[str, ...]) -> tuple[Network, ...]:
    """The client networks named (``10.0.0.0/8``, ``192.0.2.7``), or the
    loopback ones when none are. Raises ``ConfigError``."""
    try:
        named = tuple(ip_network(a.strip(), strict=False) for a in allowed if a.strip())
    except ValueError as exc:
        raise ConfigError(f"allowed ips: {exc}") from None
    return named or LOOPBACK


def is_allowed(host: str, networks: tuple[Network, ...]) -> bool:
    """Whether a client at ``host`` (an IPv4-mapped IPv6 address counts as
    its IPv4 one) is in ``networks``."""
    addr = ip_address(host.split("%")[0])
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr in net for net in networks)


def check_tcp_host(host: str, allowed: tuple[str, ...]) -> None:
    """Refuse (``ConfigError``) to listen on a host that is not loopback
    when no client networks are named."""
    if allowed or is_loopback(host):
        return
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise ConfigError(f"cannot resolve {host!r}: {exc}") from None
    if not all(ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos):
        raise ConfigError(f"{host} is not a loopback address: name the client networks allowed to connect (--allowed-ips)")


def bind_unix(path: str, mode: int, group: str = "") -> socket.socket:
    """A stream socket bound at ``path`` with ``mode`` and ``group`` (not
    listening yet). Raises ``ConfigError``; OSError from the system."""
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ConfigError(f"{path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(path) == 0:
                raise ConfigError(f"another server is listening on {path}")
        os.unlink(path)
    gid = -1
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ConfigError(f"no such group: {group}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
        os.chown(path, -1, gid)
        os.chmod(path, mode)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    return sock


def remove_socket(path: str) -> None:
    """Remove a Unix socket's path when the daemon stops (gone already: fine)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def bind(address: spamd.Address, mode: int, group: str, allowed: tuple[str, ...]) -> tuple[socket.socket, spamd.Address]:
    """A non-blocking stream socket bound where ``address`` says (a Unix
    socket, `bind_unix`, or TCP, `check_tcp_host` first), not listening yet,
    and the address it is bound to (the real port when port 0 was asked
    for). Non-blocking because forked workers share it: whichever takes a
    connection has it, the others' accept finds none. Raises
    ``ConfigError``; OSError from the system."""
    if address.path:
        sock = bind_unix(address.path, mode, group)
    else:
        check_tcp_host(address.host, allowed)
        sock = socket.socket(socket.AF_INET6 if ":" in address.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address.host, address.port))
        except BaseException:
            sock.close()
            raise
        host, port = sock.getsockname()[:2]
        address = spamd.Address(host=str(host), port=int(port))
    sock.setblocking(False)
    return sock, address
