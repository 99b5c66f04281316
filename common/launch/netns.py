"""Run a process tree in a private network namespace that has only loopback up.

Why: the rendezvous servers the launchers start (torchrun's c10d TCPStore, Paddle's TCPStore in
``spawn`` and ``launch``, TensorFlow's gRPC servers) listen on every interface (0.0.0.0 / ::)
for the whole run, and none of the frameworks has a bind-address option. A process tree started
in a fresh network namespace sees only its own ``lo``: the same ports are then unreachable from
any other namespace, the host's included, so nothing of the run can be reached from outside the
machine. All of parbench's local runs already address each other as 127.0.0.1 and set
``GLOO_SOCKET_IFNAME=lo``, so they work unchanged inside such a namespace.

Linux only, stdlib only (``listening_sockets`` needs psutil). What it does not cover: a
multi-node run (its ranks must reach each other over a real interface) and traffic that does
not use sockets (NCCL over shared memory / NVLink on one node is unaffected either way).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import socket
import struct
import subprocess
import sys

CLONE_NEWNET = 0x40000000  # <sched.h>
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS = 0x8913      # <linux/sockios.h>
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1               # <net/if.h>
_IFREQ = "16sH22x"         # struct ifreq: char ifr_name[16]; short ifr_flags; padded to 40 bytes

# Loaded in the parent at import, so the forked child does as little as possible before exec.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def enter_private_network() -> None:
    """Move the calling process into a new network namespace and bring its ``lo`` up.

    Meant for a freshly forked child before exec (``subprocess.Popen(preexec_fn=...)``); every
    descendant of that child inherits the namespace. As root (CAP_SYS_ADMIN) it is a plain
    ``unshare(CLONE_NEWNET)``. Otherwise that fails with EPERM, and it falls back to an
    unprivileged user namespace created together with the network namespace, mapping the
    caller's own uid and gid to themselves. That keeps uid semantics sane: ``getuid()``,
    ``getgid()`` and the ownership of the user's files are unchanged; permission checks still
    use the real credentials (supplementary groups included); the full capability set the new
    user namespace grants is used only to bring ``lo`` up here and is dropped by the kernel at
    ``exec`` (non-root uid, no file capabilities). Visible differences: files of unmapped users
    show as owner ``nobody`` in ``stat``, and ``setgroups`` is denied (the kernel requires that
    for an unprivileged gid map).

    Raises OSError with the reason on failure. Note that when this runs as ``preexec_fn``,
    ``subprocess`` replaces any exception with a bare "Exception occurred in preexec_fn", so
    callers should ask ``private_network_unavailable()`` first: it runs this same code and
    keeps the message.
    """
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, f"network namespaces exist only on Linux, not {sys.platform}")
    libc = _LIBC
    if libc.unshare(CLONE_NEWNET) != 0:
        first = ctypes.get_errno()
        if first != errno.EPERM:
            raise OSError(first, f"unshare(CLONE_NEWNET) failed: {os.strerror(first)}")
        _enter_user_and_network_namespace(libc)
    _bring_loopback_up()


def _enter_user_and_network_namespace(libc) -> None:
    """Unprivileged path: a user namespace mapping only our own uid/gid, plus a netns in it."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        why = "user.max_user_namespaces reached" if err == errno.ENOSPC else os.strerror(err)
        raise OSError(err, "unshare(CLONE_NEWNET) not permitted and an unprivileged user "
                           f"namespace failed too ({why}): run as root, or allow "
                           "unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
                           "kernel.unprivileged_userns_clone=1, no AppArmor/SELinux block)")
    try:
        _write_proc("/proc/self/setgroups", "deny")
        _write_proc("/proc/self/uid_map", f"{uid} {uid} 1")
        _write_proc("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        raise OSError(exc.errno, f"user namespace created but its id maps failed: {exc}") from exc


def _write_proc(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _bring_loopback_up() -> None:
    """``ip link set lo up`` without the ``ip`` binary: SIOCGIFFLAGS, set IFF_UP, SIOCSIFFLAGS.

    The kernel assigns 127.0.0.1/8 and ::1 to ``lo`` by itself when it comes up.
    """
    import fcntl  # here, not at the top: Windows has none, and the module must import there

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            request = struct.pack(_IFREQ, b"lo", 0)
            _, flags = struct.unpack(_IFREQ, fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))
        except OSError as exc:
            raise OSError(exc.errno, f"bringing lo up in the new network namespace failed: "
                                     f"{exc.strerror}") from exc


# Runs in the probe child after exec: stdlib only, so it does not depend on parbench being
# importable there. Exit 0 and print nothing when the child is in another namespace than argv[1]
# (the parent's), sees only ``lo``, and loopback TCP works; otherwise print what is wrong.
_PROBE_CHILD = """
import os, socket, sys
if os.readlink("/proc/self/ns/net") == sys.argv[1]:
    sys.exit("the child is still in the parent's network namespace")
names = sorted(name for _, name in socket.if_nameindex())
if names != ["lo"]:
    sys.exit(f"the new namespace has interfaces {names}, expected only lo")
with socket.create_server(("127.0.0.1", 0)) as server:
    with socket.create_connection(server.getsockname(), timeout=10):
        server.accept()[0].close()
"""


@functools.cache
def private_network_unavailable() -> str | None:
    """None when a private network namespace works here, else a short reason why not.

    It probes instead of guessing from the uid: whether unshare is allowed depends on
    capabilities, sysctls, seccomp profiles of containers and LSMs. A short-lived child is
    started exactly the way the harness starts a launcher (``preexec_fn=enter_private_network``)
    and then checks from inside that it is in a new namespace with only ``lo``, and that TCP over
    127.0.0.1 works. Cached per process: the answer does not change during a run.
    """
    if not sys.platform.startswith("linux"):
        return f"network namespaces exist only on Linux, not {sys.platform}"
    read_fd, write_fd = os.pipe()
    try:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _PROBE_CHILD, os.readlink("/proc/self/ns/net")],
                preexec_fn=functools.partial(_enter_and_report, write_fd),
                capture_output=True, text=True, timeout=60)
        finally:
            os.close(write_fd)  # the child's copy closed at exec or exit: reading cannot block
    except subprocess.SubprocessError as exc:
        reason = os.read(read_fd, 4096).decode(errors="replace")
        return reason or f"starting a child in a new network namespace failed: {exc}"
    finally:
        os.close(read_fd)
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return f"a child in a new network namespace failed its self-check: {detail}"
    return None


def _enter_and_report(write_fd: int) -> None:
    """``enter_private_network`` for the probe child, writing a failure's message to ``write_fd``
    first: ``subprocess`` replaces an exception in ``preexec_fn`` with a message-less one."""
    try:
        enter_private_network()
    except OSError as exc:
        os.write(write_fd, (exc.strerror or str(exc)).encode()[:1000])
        raise


def listening_sockets(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP/TCP6 socket in LISTEN state owned by one of ``pids``.

    Seen from the *calling* process's network namespace, as ``ss -ltnp`` run here would show
    them: ``psutil.net_connections`` reads this process's ``/proc/net/tcp{,6}`` and matches the
    socket inodes there to the pids' open files, so a socket inside another namespace is not
    listed, which is exactly what "reachable from outside" means. (``/proc/PID/net/tcp`` would
    be the wrong source: it is the namespace of PID, i.e. the view from inside.) Matching other
    users' processes needs root, as ``ss -p`` does.
    """
    import psutil  # imported here: the rest of this module is stdlib only

    found = {(conn.laddr.ip, conn.laddr.port, conn.pid)
             for conn in psutil.net_connections(kind="tcp")
             if conn.status == psutil.CONN_LISTEN and conn.pid in pids}
    return sorted(found)
