"""Multi-node runs: what the options mean and what every node must agree on.

A multi-node run is one ``parbench run`` per node, each with the same options and its own
``--node-rank``; the frameworks' own launchers start and connect the training processes
(torchrun's static rendezvous, ``paddle.distributed.launch --nnodes --master``, ``TF_CONFIG``
for TensorFlow's workers). World size = nodes x devices per node; global rank r = node x
devices + local rank, and it reads shard r of every global batch, exactly as on one node.
How the nodes check in with node 0 and watch each other is in checkin.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from parbench.run.registry import LAUNCHERS, Backend, spanning_backends

# Options that may differ between the nodes of one run: where each node keeps its files and
# logs, how long it waits, what identifies the node itself, and how it names node 0 (a
# PaddleJob gives pod 0 its own IP and the others a service name; that a node reached node 0's
# check-in at its --master is the agreement that counts).
NODE_LOCAL = ("node_rank", "out", "verbose", "timeout", "data_dir", "isolate_network",
              "ifname", "join_timeout", "config", "master")


class NodesError(ValueError):
    """A multi-node option that cannot work; config turns it into a UsageError."""


@dataclass(frozen=True)
class Nodes:
    nnodes: int
    node_rank: int
    master_host: str
    master_port: int  # the framework's rendezvous (torchrun's store, Paddle's master)
    ifname: str | None  # the collectives' network interface; None: the framework's choice
    join_timeout: float  # seconds node 0 waits for every node to check in (and they for it)

    @property
    def checkin_port(self) -> int:
        """parbench's own connection between the nodes (checkin.py), next to the rendezvous."""
        return self.master_port + 1

    @property
    def loopback(self) -> bool:
        return is_loopback(self.master_host)

    def ranks(self, devices_per_node: int) -> range:
        """This node's global ranks: nodes are numbered node by node."""
        first = self.node_rank * devices_per_node
        return range(first, first + devices_per_node)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_master(text: str) -> tuple[str, int]:
    """'HOST:PORT' (an IPv6 host in brackets) -> (host, port); the check-in takes PORT + 1."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65534:
        raise NodesError(f"--master wants HOST:PORT with PORT in 1..65534 (parbench also uses "
                         f"PORT+1), got {text!r}")
    return host, int(port)


def resolve_nodes(nnodes: int, node_rank: int, master: str | None, ifname: str | None,
                  join_timeout: float, backend: Backend, launcher: str) -> Nodes | None:
    """The checked multi-node settings, or None for a single-node run."""
    if nnodes < 1:
        raise NodesError(f"--nnodes must be at least 1, got {nnodes}")
    if nnodes == 1:
        if node_rank != 0 or master is not None:
            raise NodesError("--node-rank and --master belong to multi-node runs: give "
                             "--nnodes N (N > 1) too")
        return None
    why = LAUNCHERS[launcher].single_node
    if why:
        raise NodesError(f"{backend.name} with launcher {launcher} runs on one machine only "
                         f"({why}); multi-node backends: {spanning_backends()}")
    if not 0 <= node_rank < nnodes:
        raise NodesError(f"--node-rank must be in 0..{nnodes - 1} for --nnodes {nnodes}, "
                         f"got {node_rank}")
    if master is None:
        raise NodesError("a multi-node run needs --master HOST:PORT (node 0's address), or "
                         "--from-slurm")
    if join_timeout <= 0:
        raise NodesError(f"--join-timeout must be positive, got {join_timeout}")
    host, port = parse_master(master)
    default_ifname = "lo" if is_loopback(host) else None
    return Nodes(nnodes, node_rank, host, port, ifname or default_ifname, join_timeout)


def interface_env(nodes: Nodes | None) -> dict[str, str]:
    """Environment naming the collectives' interface (gloo, NCCL; Paddle's gloo reads
    GLOO_SOCKET_IFNAME too; TF's RING collectives use the TF_CONFIG addresses). A single-node
    run keeps to loopback; --ifname wins over the user's environment."""
    if nodes is None:
        return {"GLOO_SOCKET_IFNAME": "lo"}
    if nodes.ifname is None:
        return {}
    return {"GLOO_SOCKET_IFNAME": nodes.ifname, "NCCL_SOCKET_IFNAME": nodes.ifname}


def comparable(config: dict, derived: dict) -> dict:
    """What every node of a run must have in common: its options except the node-local ones,
    plus what they resolved to on that node (world size, threads, spec hash)."""
    return {**{k: v for k, v in config.items() if k not in NODE_LOCAL}, **derived}


def differences(node0: dict, other: dict, node: int) -> list[str]:
    """One phrase per difference, options first ('--global-batch: node 1 has 64, node 0 has
    128'); the spec hash is named only when no option explains it (the data differ)."""
    keys = sorted(set(node0) | set(other), key=lambda k: (k == "spec_sha256", k))
    found = [f"{_option(k)}: node {node} has {other.get(k)!r}, node 0 has {node0.get(k)!r}"
             for k in keys if node0.get(k) != other.get(k)]
    if len(found) > 1 and found[-1].startswith(_option("spec_sha256")):
        found.pop()
    return found


def _option(key: str) -> str:
    return key if key in ("spec_sha256", "world_size", "threads_resolved") \
        else "--" + key.replace("_", "-")
