"""The one-device example on DEVICES devices with JAX: the second step of the porting examples.
One process, one program: the batch is split over a mesh of the devices, the parameters are
replicated, and the step is single_jax.py's own, compiled for those shardings; XLA adds the
all-reduce of the gradients. So every step is the one-device step, and the losses printed are
single_jax.py's.

    python examples/dp_jax.py [--steps 20]
"""

import argparse
import os

from data import DEVICES, LR, batches, initial_weights, make_data

# --- setup: DEVICES CPU devices, asked for before JAX starts (on GPUs, drop this: JAX sees them)
os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                           f"--xla_force_host_platform_device_count={DEVICES}")

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from single_jax import make_train_step  # noqa: E402

MESH = Mesh(jax.devices()[:DEVICES], ("data",))
SPLIT = NamedSharding(MESH, P("data"))  # rows over the devices, in order: shard() of data.py
REPLICATED = NamedSharding(MESH, P())


def main():
    parser = argparse.ArgumentParser(description="data-parallel training, JAX sharding")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    params = jax.device_put({k: jnp.asarray(v) for k, v in initial_weights().items()},
                            REPLICATED)
    optimizer = optax.sgd(LR)
    opt_state = jax.device_put(optimizer.init(params), REPLICATED)
    train_step = make_train_step(optimizer)  # jit follows its inputs' shardings
    for step, rows in enumerate(batches(steps)):
        x, y = jax.device_put((features[rows], labels[rows]), SPLIT)
        if step == 0:
            print(f"devices {len(x.sharding.device_set)}")
        params, opt_state, loss = train_step(params, opt_state, x, y)
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
