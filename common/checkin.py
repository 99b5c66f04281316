"""How the nodes of a multi-node run check in with node 0 and keep watch on each other.

The frameworks' launchers connect the training processes. What none of them does, parbench does
over one TCP connection from each node's parbench to node 0's, at the master host's PORT+1
(``Nodes.checkin_port``); messages are JSON objects, one per line:

1. **Check-in**, before anything starts. Each node sends its configuration
   (``nodes.comparable``) and, for TensorFlow, the ports of its workers. Node 0 waits up to
   --join-timeout for every node: one that never comes fails the run, and node 0's record names
   it. A node whose configuration differs is refused on every node with one line naming the
   difference, and nothing trains. TensorFlow has no launcher, so node 0 also hands every node
   the address of every worker (its ``TF_CONFIG``).
2. **Watch**, while the run trains. Every HEARTBEAT_S each side says it is alive (members with
   their progress). Node 0 ends its run at once when a node reports a failure (which rank died
   first, and how), when a node's connection closes (its parbench ended: killed or crashed), or
   when a node has been silent for SILENT_S (stopped, or cut off); it tells the others to stop.
   A member ends its run when node 0 says so, disappears or falls silent.
3. **End**. Each member reports how its part ended; node 0 decides the run's status (ok only if
   every node's part is ok and its record is complete) and tells every member, which exits with it.

So a node that dies ends every node's run within POLL_S of its processes ending, and a node that
hangs within SILENT_S; the frameworks' collective timeouts (5 minutes for torch) are the bound
only for processes that hang while their parbench stays alive, and --timeout bounds everything.
"""

from __future__ import annotations

import json
import select
import socket
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import asdict, dataclass

from .config import UsageError
from .nodes import Nodes, differences

HEARTBEAT_S = 2.0
SILENT_S = 30.0  # a node unheard of this long is given up
HELLO_TIMEOUT_S = 10.0  # a connection that says nothing parbench-like this long is dropped
END_WAIT_S = 60.0  # how long the nodes wait for each other's end of the run
RETRY_S = 0.5


class NodeFailure(Exception):
    """The run cannot go on because of another node (never joined, left, failed)."""


@dataclass
class CheckIn:
    """Node 0's answer to every node."""

    addresses: list[str]  # per node: node 0's master host, the others as node 0 reached them
    hosts: list[str]  # per node: its host name
    worker_ports: list[list[int]]  # per node: its TensorFlow workers' ports (else empty)

    def workers(self) -> list[str]:
        """Every TensorFlow worker's address, in global rank order."""
        return [f"{_bracketed(address)}:{port}"
                for address, ports in zip(self.addresses, self.worker_ports) for port in ports]


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


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


def check_in(nodes: Nodes, config: dict, worker_ports: list[int]) -> tuple[Link, CheckIn]:
    """Meet every node of the run (see the module docstring). UsageError when a node was
    started differently, NodeFailure when one never came or node 0 cannot be reached."""
    hello = {"type": "hello", "node": nodes.node_rank, "host": socket.gethostname(),
             "config": config, "worker_ports": worker_ports}
    return _gather(nodes, hello) if nodes.node_rank == 0 else _join(nodes, hello)


def _gather(nodes: Nodes, hello: dict) -> tuple[Link, CheckIn]:
    """Node 0: wait for every other node's hello, compare, answer."""
    hellos, channels, addresses = {0: hello}, {}, {0: nodes.master_host}
    deadline = time.monotonic() + nodes.join_timeout
    with socket.create_server((nodes.master_host, nodes.checkin_port)) as server:
        while len(hellos) < nodes.nnodes:
            left = deadline - time.monotonic()
            if left <= 0:
                _close_all(channels)
                missing = [str(n) for n in range(nodes.nnodes) if n not in hellos]
                raise NodeFailure(f"node(s) {', '.join(missing)} never joined: node 0 waited "
                                  f"{nodes.join_timeout:g} s (--join-timeout) at "
                                  f"{nodes.master_host}:{nodes.checkin_port}")
            server.settimeout(left)
            try:
                sock, peer = server.accept()
            except TimeoutError:
                continue
            channel = Channel(sock, peer[0])
            node = _greeted(channel, nodes, hellos)
            if node is not None:
                channels[node], addresses[node] = channel, peer[0]
    problems = [p for node in sorted(channels)
                for p in differences(hello["config"], hellos[node]["config"], node)]
    if problems:
        reason = "the nodes were started with different settings: " + "; ".join(problems)
        _broadcast(channels, {"type": "refused", "reason": reason})
        _close_all(channels)
        raise UsageError(reason)
    answer = CheckIn([addresses[n] for n in range(nodes.nnodes)],
                     [hellos[n]["host"] for n in range(nodes.nnodes)],
                     [hellos[n]["worker_ports"] for n in range(nodes.nnodes)])
    _broadcast(channels, {"type": "start", **asdict(answer)})
    return Coordinator(nodes, channels, answer.hosts), answer


def _greeted(channel: Channel, nodes: Nodes, hellos: dict[int, dict]) -> int | None:
    """The node a new connection checks in as, or None (the connection closed) when it is not
    a parbench node or its node rank is taken."""
    try:
        message = channel.receive(HELLO_TIMEOUT_S)
    except (TimeoutError, EOFError, OSError, ValueError):
        channel.close()
        return None
    node = message.get("node") if isinstance(message, dict) else None
    if not isinstance(node, int) or message.get("type") != "hello" \
            or not 0 < node < nodes.nnodes or node in hellos:
        _try_send(channel, {"type": "refused", "reason": f"node 0 already has a node {node} "
                            f"or expects node ranks 1..{nodes.nnodes - 1}"})
        channel.close()
        return None
    hellos[node] = message
    return node


def _join(nodes: Nodes, hello: dict) -> tuple[Link, CheckIn]:
    """A member: reach node 0 (it may start later), say hello, wait for its answer."""
    deadline = time.monotonic() + nodes.join_timeout
    address = (nodes.master_host, nodes.checkin_port)
    while True:
        try:
            sock = socket.create_connection(address, timeout=RETRY_S * 4)
            break
        except OSError as err:
            if time.monotonic() > deadline:
                raise NodeFailure(f"node {nodes.node_rank} could not reach node 0 at "
                                  f"{address[0]}:{address[1]} within {nodes.join_timeout:g} s "
                                  f"(--join-timeout): {err.strerror or err}") from None
            time.sleep(RETRY_S)
    channel = Channel(sock, f"node 0 ({address[0]})")
    try:
        channel.send(hello)
        answer = channel.receive(max(deadline - time.monotonic(), HELLO_TIMEOUT_S))
    except (TimeoutError, EOFError, OSError) as err:
        channel.close()
        raise NodeFailure(f"node 0 did not let node {nodes.node_rank} in: {err}") from None
    if answer.get("type") != "start":
        channel.close()
        raise UsageError(answer.get("reason", f"node 0 answered {answer!r}"))
    fields = {k: answer[k] for k in ("addresses", "hosts", "worker_ports")}
    return Member(nodes, channel), CheckIn(**fields)


def _broadcast(channels: dict[int, Channel], message: dict) -> None:
    for channel in channels.values():
        _try_send(channel, message)


def _try_send(channel: Channel, message: dict) -> bool:
    try:
        channel.send(message)
    except OSError:
        return False  # the peer is gone; whoever watches it finds out
    return True


def _close_all(channels: dict[int, Channel]) -> None:
    for channel in channels.values():
        channel.close()


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
            _broadcast(self.channels, {"type": "alive", "done": done})
        for node, channel in self.channels.items():
            problem = self._check(node, channel)
            if problem:
                self.problem = problem
                _broadcast(self.channels, {"type": "stop", "reason": problem})
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
            _broadcast(self.channels, {"type": "stop", "reason": f"node 0 failed: {first}"})
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
        _broadcast(self.channels, {"type": "verdict", "status": status, "error": error})
        _close_all(self.channels)
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
        if not _try_send(self.channel, {"type": "end", "status": status, "error": mine,
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
