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

The channel is channel.py; the watch and the end, nodewatch.py.

So a node that dies ends every node's run within POLL_S of its processes ending, and a node that
hangs within SILENT_S; the frameworks' collective timeouts (5 minutes for torch) are the bound
only for processes that hang while their parbench stays alive, and --timeout bounds everything.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass

from parbench.base.errors import UsageError

from .channel import HELLO_TIMEOUT_S, Channel, broadcast, close_all, try_send
from .nodes import Nodes, differences
from .nodewatch import Coordinator, Link, Member

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
    with _listen(nodes) as server:
        while len(hellos) < nodes.nnodes:
            left = deadline - time.monotonic()
            if left <= 0:
                close_all(channels)
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
        broadcast(channels, {"type": "refused", "reason": reason})
        close_all(channels)
        raise UsageError(reason)
    answer = CheckIn([addresses[n] for n in range(nodes.nnodes)],
                     [hellos[n]["host"] for n in range(nodes.nnodes)],
                     [hellos[n]["worker_ports"] for n in range(nodes.nnodes)])
    broadcast(channels, {"type": "start", **asdict(answer)})
    return Coordinator(nodes, channels, answer.hosts), answer


def _listen(nodes: Nodes) -> socket.socket:
    """Node 0's check-in socket at the master's host: the master must be this machine."""
    try:
        return socket.create_server((nodes.master_host, nodes.checkin_port))
    except OSError as err:
        raise UsageError(f"--master {nodes.master_host}:{nodes.master_port}: node 0 cannot "
                         f"listen at {nodes.master_host}:{nodes.checkin_port} "
                         f"({err.strerror or err}); give an address of node 0's own "
                         "machine and a free PORT and PORT+1") from None


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
        try_send(channel, {"type": "refused", "reason": f"node 0 already has a node {node} "
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
