"""Random numbers on each of DEVICES devices with JAX: the per-replica step of the porting
examples. A dropout mask must differ from one replica to the next, since each replica drops
units of other rows. In a program written per device (shard_map, pmap) every device runs the
same code with the same key, so it draws the same numbers unless the key is folded with the
device's index. A program written for the global array (a jit over a sharded batch) draws the
whole batch's mask once: each device gets its rows' part, and the mask is the one a single
device draws. The script prints all three.

    python examples/replicas_jax.py
"""

import argparse

import jax
import numpy as np
from data import BATCH, DEVICES, DROPOUT, HIDDEN
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

jax.config.update("jax_num_cpu_devices", DEVICES)  # before JAX first uses a device
MESH = Mesh(jax.devices()[:DEVICES], ("data",))
KEY = jax.random.key(0)


# --- random numbers: per device, fold the device's index into the key; for the global array,
# draw once (JAX's default threefry is partitionable: each device computes only its part)
def mask(key, rows):
    return (jax.random.uniform(key, (rows, HIDDEN)) >= DROPOUT) / (1 - DROPOUT)


def per_device(draw):
    """Each device's mask for its BATCH / DEVICES rows, stacked: [DEVICES * rows, HIDDEN]."""
    return jax.jit(jax.shard_map(draw, mesh=MESH, in_specs=(), out_specs=P("data")))()


def same_key():
    return mask(KEY, BATCH // DEVICES)


def folded_key():
    return mask(jax.random.fold_in(KEY, jax.lax.axis_index("data")), BATCH // DEVICES)


def parts_equal(masks):
    parts = np.split(np.asarray(masks), DEVICES)
    return all(np.array_equal(parts[0], other) for other in parts[1:])


def main():
    argparse.ArgumentParser(description="random numbers per replica, JAX").parse_args()
    split = NamedSharding(MESH, P("data"))
    global_mask = jax.jit(lambda: mask(KEY, BATCH), out_shardings=split)()
    print(f"devices {len(global_mask.sharding.device_set)}\n"
          f"one key: masks equal {parts_equal(per_device(same_key))}\n"
          f"key folded with the device index: masks equal {parts_equal(per_device(folded_key))}\n"
          f"one global draw, sharded: equals one device's "
          f"{np.array_equal(np.asarray(global_mask), np.asarray(mask(KEY, BATCH)))}")


if __name__ == "__main__":
    main()
