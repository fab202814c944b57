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

import errno
import grp
import os
import socket
import stat
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network

from spamfilter import spamd
from spamfilter.config import is_loopback
from spamfilter.errors import AddressInUse, ConfigError, SpamfilterError

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


def cannot_listen(where: object, exc: OSError) -> SpamfilterError:
    """The error of a failed bind or listen at ``where``: ``AddressInUse``
    when another server holds the address (try again later), else
    ``ConfigError`` (no permission for the port, an address not of this
    host)."""
    text = f"cannot listen on {where}: {exc.strerror or exc}"
    return AddressInUse(text) if exc.errno == errno.EADDRINUSE else ConfigError(text)


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


#: The listening sockets' backlog: connections wait there while every
#: process is busy (a burst of MTA or spamc connections). The kernel caps
#: it at net.core.somaxconn.
BACKLOG = 1024


def bind_unix(path: str, mode: int, group: str = "") -> socket.socket:
    """A stream socket bound at ``path`` with ``mode`` and ``group`` (not
    listening yet). Raises ``ConfigError``; OSError from the system."""
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ConfigError(f"{path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(path) == 0:
                raise AddressInUse(f"another server is listening on {path}")
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


def bind_all(address: spamd.Address, mode: int, group: str, allowed: tuple[str, ...]) -> tuple[list[socket.socket], spamd.Address]:
    """Like ``bind``, but a TCP host name is bound on every address it
    resolves to, and ``localhost`` on the loopback address of each family
    (127.0.0.1 and ::1, whatever /etc/hosts says), as spamd does. spamc
    without ``-d`` tries ::1 first: served there, it connects at once (else
    it writes "connect to spamd on ::1 failed" to the system log and
    connects again to 127.0.0.1, for every message). Port 0 takes the first
    address's port for the others; an address the system cannot bind (no
    IPv6) is left out. Returns the sockets and the address asked for, with
    the real port."""
    if address.path or _is_literal(address.host):
        sock, bound = bind(address, mode, group, allowed)
        return [sock], bound
    check_tcp_host(address.host, allowed)
    # Without a host name getaddrinfo gives each family's loopback address.
    name = None if address.host.lower() == "localhost" else address.host
    try:
        infos = socket.getaddrinfo(name, address.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"cannot resolve {address.host!r}: {exc}") from None
    # IPv4 first: with port 0 its port is the one the others take.
    hosts = list(dict.fromkeys(str(info[4][0]) for info in sorted(infos, key=lambda info: info[0] != socket.AF_INET)))
    sockets: list[socket.socket] = []
    port = address.port
    try:
        for host in hosts:
            try:
                sock, bound = bind(spamd.Address(host=host, port=port), mode, group, allowed, v6only=len(hosts) > 1)
            except OSError as exc:
                if sockets and exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue
                raise
            sockets.append(sock)
            port = bound.port
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets, spamd.Address(host=address.host, port=port)


def _is_literal(host: str) -> bool:
    """Whether ``host`` is an IP address rather than a name."""
    try:
        ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


def bind(address: spamd.Address, mode: int, group: str, allowed: tuple[str, ...], *, v6only: bool = False) -> tuple[socket.socket, spamd.Address]:
    """A non-blocking stream socket bound where ``address`` says (a Unix
    socket, `bind_unix`, or TCP, `check_tcp_host` first), not listening yet,
    and the address it is bound to (the real port when port 0 was asked
    for). Non-blocking because forked workers share it: whichever takes a
    connection has it, the others' accept finds none. ``v6only``: an IPv6
    socket takes no IPv4 connections (bound beside an IPv4 one). Raises
    ``ConfigError``; OSError from the system."""
    if address.path:
        sock = bind_unix(address.path, mode, group)
    else:
        check_tcp_host(address.host, allowed)
        v6 = ":" in address.host
        sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if v6 and v6only:
                # ::1 beside 127.0.0.1 on one port: the IPv6 socket takes IPv6 only.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address.host, address.port))
        except BaseException:
            sock.close()
            raise
        host, port = sock.getsockname()[:2]
        address = spamd.Address(host=str(host), port=int(port))
    sock.setblocking(False)
    return sock, address
