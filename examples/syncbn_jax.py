"""The data-parallel example with a BatchNorm whose batch statistics are taken over the global
batch, across the devices (synchronized BatchNorm): the synchronized-BatchNorm step of the
porting examples. In a jit over a sharded batch that is what a mean over the batch axis already
is: the program computes on the global array, and XLA all-reduces the partial sums. So
``--devices 2`` prints ``--devices 1``'s losses with no BatchNorm of a special kind. Per-device
statistics (what pmap or shard_map compute unless the mean is taken with lax.pmean over the
device axis) would take code that asks for them.

    python examples/syncbn_jax.py [--steps 20] [--devices 2]
"""

import argparse

import jax
import jax.numpy as jnp
import optax
from data import BN_EPSILON, DEVICES, HIDDEN, LR, batches, initial_weights, make_data
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from single_jax import make_train_step


# --- model: BatchNorm in training mode between the hidden layer and its ReLU; its scale and
# shift start at 1 and 0, as every framework's do. The step is single_jax.py's, given this forward
def forward(params, x):
    hidden = x @ params["hidden.weight"].T + params["hidden.bias"]
    mean, variance = hidden.mean(axis=0), hidden.var(axis=0)  # over the global batch
    normalized = (hidden - mean) / jnp.sqrt(variance + BN_EPSILON)
    hidden = jax.nn.relu(normalized * params["norm.weight"] + params["norm.bias"])
    return hidden @ params["head.weight"].T + params["head.bias"]


def main():
    parser = argparse.ArgumentParser(description="synchronized BatchNorm, JAX")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--devices", type=int, default=DEVICES, choices=(1, 2))
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    # --- setup: the CPU devices, asked for before JAX first uses one (on GPUs, drop this)
    jax.config.update("jax_num_cpu_devices", args.devices)
    mesh = Mesh(jax.devices()[:args.devices], ("data",))
    features, labels = make_data()
    weights = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    weights.update({"norm.weight": jnp.ones(HIDDEN), "norm.bias": jnp.zeros(HIDDEN)})
    params = jax.device_put(weights, NamedSharding(mesh, P()))
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer, forward)
    print(f"devices {mesh.size}")
    for step, rows in enumerate(batches(args.steps)):
        x, y = jax.device_put((features[rows], labels[rows]), NamedSharding(mesh, P("data")))
        params, opt_state, loss = train_step(params, opt_state, x, y)
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
