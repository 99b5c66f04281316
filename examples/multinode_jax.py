"""The data-parallel example across machines with JAX: the third step of the porting examples.
One process per machine (one CPU device each), every one started by hand or by the cluster's
own launcher, each calling ``jax.distributed.initialize`` with process 0's address (its
coordinator), the process count and its index. After that ``jax.devices()`` is every
process's devices: dp_jax.py's mesh and step run over them unchanged, and each process places
only its own rows of each global batch (``make_array_from_process_local_data``). Across
processes on a CPU the collectives go through gloo. The losses are single_jax.py's.

On each of 2 machines (node 0's address as --coordinator; here both on this one):

    python examples/multinode_jax.py --coordinator 127.0.0.1:29500 --processes 2 --index 0
    python examples/multinode_jax.py --coordinator 127.0.0.1:29500 --processes 2 --index 1
"""

import argparse

import jax
import jax.numpy as jnp
import optax
from data import LR, batches, initial_weights, make_data, shard
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from single_jax import make_train_step


def main():
    parser = argparse.ArgumentParser(description="data-parallel training across machines, JAX")
    parser.add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--index", type=int, required=True, help="this process, 0 to N-1")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.steps < 1 or args.processes < 1 or not 0 <= args.index < args.processes:
        parser.error("--steps and --processes must be at least 1, --index in 0..processes-1")
    # --- setup: the distributed runtime first, before anything asks JAX for a device
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator, args.processes, args.index)
    mesh = Mesh(jax.devices(), ("data",))  # every process's device
    split, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    features, labels = make_data()
    params = jax.device_put({k: jnp.asarray(v) for k, v in initial_weights().items()},
                            replicated)
    optimizer = optax.sgd(LR)
    opt_state = jax.device_put(optimizer.init(params), replicated)
    train_step = make_train_step(optimizer)
    if args.index == 0:
        print(f"devices {len(jax.devices())}", flush=True)
    for step, rows in enumerate(batches(args.steps)):
        mine = shard(rows, args.index, args.processes)  # this process's rows only
        x, y = (jax.make_array_from_process_local_data(split, array[mine])
                for array in (features, labels))
        params, opt_state, loss = train_step(params, opt_state, x, y)
        if args.index == 0:
            print(f"step {step} loss {float(loss):.7f}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
