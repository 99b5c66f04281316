"""One connection between two nodes' parbench processes: whole JSON messages, one per line,
sent and received without blocking the harness's poll (see checkin.py for what they say)."""

from __future__ import annotations

import json
import select
import socket
import time
from collections import deque

HELLO_TIMEOUT_S = 10.0  # a connection that says nothing parbench-like this long is dropped


class Channel:
    """One connection: whole JSON messages in, whole messages out."""

    def __init__(self, sock: socket.socket, peer: str):
        self.sock, self.peer = sock, peer
        self.buffer, self.pending, self.closed = b"", deque(), False
        self.heard = time.monotonic()
        sock.settimeout(HELLO_TIMEOUT_S)  # bounds a send to a peer that stopped reading

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def poll(self) -> list[dict]:
        """The messages that arrived, without waiting; EOFError once the peer has closed and
        every message it sent before closing was returned."""
        while not self.closed and select.select([self.sock], [], [], 0)[0]:
            chunk = self.sock.recv(1 << 16)
            self.closed = not chunk
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            self.pending.extend(json.loads(line) for line in lines if line.strip())
            self.heard = time.monotonic()
        if self.closed and not self.pending:
            raise EOFError(f"{self.peer} closed the connection")
        messages = list(self.pending)
        self.pending.clear()
        return messages

    def receive(self, timeout: float) -> dict:
        """The next message; TimeoutError after ``timeout`` seconds, EOFError if the peer
        closed first."""
        deadline = time.monotonic() + timeout
        while True:
            messages = self.poll()
            if messages:
                self.pending.extend(messages[1:])
                return messages[0]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.peer} said nothing for {timeout:g} s")
            select.select([self.sock], [], [], left)

    def close(self) -> None:
        self.sock.close()


def broadcast(channels: dict[int, Channel], message: dict) -> None:
    for channel in channels.values():
        try_send(channel, message)


def try_send(channel: Channel, message: dict) -> bool:
    try:
        channel.send(message)
    except OSError:
        return False  # the peer is gone; whoever watches it finds out
    return True


def close_all(channels: dict[int, Channel]) -> None:
    for channel in channels.values():
        channel.close()
