"""The data-parallel example with every parameter sharded over DEVICES devices (a jit over a
mesh, the parameters split along their first dimension): the sharded step of the porting
examples. Each device holds half of each weight and of its optimizer state; XLA gathers the
weights where a product needs them whole and hands each device its shard of the gradients. The
arithmetic is the one-device step's, so the losses printed are single_jax.py's; the script
prints how many of the parameters the first device holds, and the collectives in the compiled
step.

    python examples/sharded_jax.py [--steps 20]
"""

import argparse
import re

import jax
import jax.numpy as jnp
import optax
from data import DEVICES, LR, batches, initial_weights, make_data
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from single_jax import make_train_step

# --- setup: DEVICES CPU devices, asked for before JAX first uses a device (on GPUs, drop this)
jax.config.update("jax_num_cpu_devices", DEVICES)
MESH = Mesh(jax.devices()[:DEVICES], ("data",))
SPLIT = NamedSharding(MESH, P("data"))  # a batch's rows, or a tensor's first dimension


# --- model: single_jax.py's parameters, each split along its first dimension; the step is
# single_jax.py's, compiled for these shardings (jit follows its inputs')
def sharded_params():
    return jax.device_put({k: jnp.asarray(v) for k, v in initial_weights().items()}, SPLIT)


def held_by(device, tree):
    return sum(shard.data.size for leaf in jax.tree.leaves(tree)
               for shard in leaf.addressable_shards if shard.device == device)


def collectives(train_step, *args):
    """The collectives XLA compiled into the step, by kind: the weights' all-gathers, and how
    the gradients come back (XLA's CPU backend: one all-reduce of them all, each device keeping
    its shard, where a GPU build may reduce-scatter)."""
    program = train_step.lower(*args).compile().as_text()
    found = re.findall(r"\b(all-gather|all-reduce|reduce-scatter)(?:-start)?\(", program)
    return " ".join(f"{kind} {found.count(kind)}" for kind in sorted(set(found)))


def main():
    parser = argparse.ArgumentParser(description="sharded data parallelism, JAX")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    params = sharded_params()
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)  # shaped and sharded like the parameters
    train_step = make_train_step(optimizer)
    whole = sum(leaf.size for leaf in jax.tree.leaves(params))
    print(f"devices {len(MESH.devices)}\nparameters held {held_by(MESH.devices[0], params)} "
          f"of {whole}")
    for step, rows in enumerate(batches(steps)):
        x, y = jax.device_put((features[rows], labels[rows]), SPLIT)
        if step == 0:
            print(f"collectives {collectives(train_step, params, opt_state, x, y)}")
        params, opt_state, loss = train_step(params, opt_state, x, y)
        print(f"step {step} loss {float(loss):.7f}")
    print(f"parameters held after training {held_by(MESH.devices[0], params)} of {whole}")


if __name__ == "__main__":
    main()
