"""The one-device example with each batch of 32 in 2 micro-batches of 16, their gradients
accumulated before one optimizer step: the gradient-accumulation step of the porting examples.
The step scans over the micro-batches, summing their gradients; each micro-batch's mean loss is
divided by the micro-batch count, so the sum is the whole batch's mean gradient, and the
losses printed are single_jax.py's.

    python examples/accumulate_jax.py [--steps 20]
"""

import argparse

import jax
import jax.numpy as jnp
import optax
from data import LR, MICRO_BATCHES, batches, initial_weights, make_data, micro_batches
from single_jax import loss_fn


# --- step: lax.scan over the stacked micro-batches carries the gradients' running sum; one
# compiled program for the whole step
def make_train_step(optimizer):
    @jax.jit
    def train_step(params, opt_state, xs, ys):
        def accumulate(summed, part):
            loss, grads = jax.value_and_grad(loss_fn)(params, *part)
            return jax.tree.map(lambda s, g: s + g / MICRO_BATCHES, summed, grads), loss

        grads, losses = jax.lax.scan(accumulate, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, losses.mean()
    return train_step


def main():
    parser = argparse.ArgumentParser(description="gradient accumulation, JAX")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer)
    for step, rows in enumerate(batches(steps)):
        parts = micro_batches(rows)
        xs, ys = jnp.stack([features[p] for p in parts]), jnp.stack([labels[p] for p in parts])
        params, opt_state, loss = train_step(params, opt_state, xs, ys)
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
