"""The watch of a multi-node run, after check-in (checkin.py): each node's side of it, node 0's
``Coordinator`` and every other node's ``Member``, polled by the harness while the run trains
and asked at the end for the whole run's status."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

from .channel import Channel, broadcast, close_all, try_send
from .nodes import Nodes

HEARTBEAT_S = 2.0
SILENT_S = 30.0  # a node unheard of this long is given up
END_WAIT_S = 60.0  # how long the nodes wait for each other's end of the run


class Link(ABC):
    """One node's side of the watch: ``watch`` while training, ``finish`` at the end."""

    def __init__(self, nodes: Nodes):
        self.nodes = nodes
        self.problem: str | None = None  # why this node stopped its run early, if it did
        self.sent = 0.0

    def heartbeat_due(self) -> bool:
        now = time.monotonic()
        if now - self.sent < HEARTBEAT_S:
            return False
        self.sent = now
        return True

    @abstractmethod
    def watch(self, done: int) -> str | None:
        """Call every poll: None while the run may go on, else why it must stop."""

    @abstractmethod
    def finish(self, status: str, error: str | None, failed_at: float | None
               ) -> tuple[str, str | None]:
        """The whole run's (status, error), from this node's (``failed_at``: when its first
        rank failed, if one did)."""


class Coordinator(Link):
    """Node 0's side: one channel per other node."""

    def __init__(self, nodes: Nodes, channels: dict[int, Channel], hosts: list[str]):
        super().__init__(nodes)
        self.channels, self.hosts = channels, hosts
        self.ends: dict[int, dict] = {}

    def _name(self, node: int) -> str:
        return f"node {node} ({self.hosts[node]})"

    def watch(self, done: int) -> str | None:
        if self.problem:
            return self.problem
        if self.heartbeat_due():
            broadcast(self.channels, {"type": "alive", "done": done})
        for node, channel in self.channels.items():
            problem = self._check(node, channel)
            if problem:
                self.problem = problem
                broadcast(self.channels, {"type": "stop", "reason": problem})
                return problem
        return None

    def _check(self, node: int, channel: Channel) -> str | None:
        if node in self.ends:
            return None
        try:
            messages = channel.poll()
        except (EOFError, OSError, ValueError):
            return (f"{self._name(node)} left the run: its parbench ended without reporting "
                    "(killed, or crashed)")
        for message in messages:
            if message["type"] == "end":
                self.ends[node] = message
                if message["status"] != "ok":
                    return f"{self._name(node)} failed: {message['error']}"
        if time.monotonic() - channel.heard > SILENT_S:
            return f"{self._name(node)} has been silent for {SILENT_S:g} s (stopped, or cut off)"
        return None

    def finish(self, status: str, error: str | None, failed_at: float | None
               ) -> tuple[str, str | None]:
        if status != "ok" and not self.problem:  # node 0's own part failed: stop the others
            first = (error or status).splitlines()[0]
            broadcast(self.channels, {"type": "stop", "reason": f"node 0 failed: {first}"})
        self._await_ends()
        failures = [(m.get("failed_at") or float("inf"), f"{self._name(n)} failed: {m['error']}")
                    for n, m in self.ends.items() if m["status"] != "ok"]
        if status != "ok":
            failures.append((failed_at or float("inf"), f"node 0: {error}"))
        elif len(self.ends) < len(self.channels) and not self.problem:
            missing = sorted(set(self.channels) - set(self.ends))
            failures.append((float("inf"), f"{self._name(missing[0])} never said how its part "
                             f"ended (waited {END_WAIT_S:g} s)"))
        if self.problem:  # what stopped the run comes first
            failures.insert(0, (float("-inf"), self.problem))
        if failures:
            status = "failed" if status == "ok" else status
            error = "\n".join(text for _, text in sorted(failures, key=lambda f: f[0]))
        broadcast(self.channels, {"type": "verdict", "status": status, "error": error})
        close_all(self.channels)
        return status, error

    def _await_ends(self) -> None:
        deadline = time.monotonic() + END_WAIT_S
        for node, channel in self.channels.items():
            while node not in self.ends:
                try:
                    message = channel.receive(max(deadline - time.monotonic(), 0.01))
                except (TimeoutError, EOFError, OSError, ValueError):
                    break
                if message["type"] == "end":
                    self.ends[node] = message


class Member(Link):
    """Every other node's side: one channel to node 0."""

    def __init__(self, nodes: Nodes, channel: Channel):
        super().__init__(nodes)
        self.channel = channel

    def watch(self, done: int) -> str | None:
        if self.problem:
            return self.problem
        self.problem = self._check(done)
        return self.problem

    def _check(self, done: int) -> str | None:
        try:
            if self.heartbeat_due():
                self.channel.send({"type": "progress", "done": done})
            messages = self.channel.poll()
        except (EOFError, OSError, ValueError):
            return "node 0 left the run: its parbench ended (killed, or crashed)"
        for message in messages:
            if message["type"] == "stop":
                return f"node 0 stopped the run: {message['reason']}"
        if time.monotonic() - self.channel.heard > SILENT_S:
            return f"node 0 has been silent for {SILENT_S:g} s (stopped, or cut off)"
        return None

    def finish(self, status: str, error: str | None, failed_at: float | None
               ) -> tuple[str, str | None]:
        mine = error if status == "ok" or not self.problem else f"{self.problem}\n{error}"
        if not try_send(self.channel, {"type": "end", "status": status, "error": mine,
                                        "failed_at": failed_at}):
            return "failed", self.problem or "node 0 is gone: nobody records the run"
        deadline = time.monotonic() + END_WAIT_S
        try:
            while True:
                message = self.channel.receive(max(deadline - time.monotonic(), 0.01))
                if message["type"] == "verdict":
                    return message["status"], message["error"]
        except (TimeoutError, EOFError, OSError, ValueError):
            return "failed", (self.problem or "node 0 did not say how the run ended "
                              f"(waited {END_WAIT_S:g} s)")
        finally:
            self.channel.close()
