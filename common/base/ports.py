"""The one address parbench's local runs use, and free ports on it."""

from __future__ import annotations

import socket

LOCALHOST = "127.0.0.1"  # rendezvous servers bind every interface; we only ever address this


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return sock.getsockname()[1]
