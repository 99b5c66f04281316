"""The one-device example with dropout on the hidden layer: the random-numbers step of the
porting examples. The masks come from numpy (data.dropout_masks: one per row of each global
batch, from the seed and the step), not from a JAX key, so every framework drops the same
units and prints the same losses. JAX's own generator, keyed alike, draws other numbers than
the other frameworks' (the script prints its first draws).

    python examples/dropout_jax.py [--steps 20]
"""

import argparse

import jax
import jax.numpy as jnp
import optax
from data import LR, batches, dropout_masks, initial_weights, make_data


# --- model: the hidden layer's output times the step's mask (what a dropout with a key draws)
def forward(params, x, mask):
    hidden = jax.nn.relu(x @ params["hidden.weight"].T + params["hidden.bias"]) * mask
    return hidden @ params["head.weight"].T + params["head.bias"]


def loss_fn(params, x, y, mask):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x, mask), y).mean()


# --- step
def make_train_step(optimizer):
    @jax.jit
    def train_step(params, opt_state, x, y, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, mask)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return train_step


def main():
    parser = argparse.ArgumentParser(description="dropout from host masks, JAX")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    draws = jax.random.uniform(jax.random.key(0), (3,))
    print("own draws", " ".join(f"{v:.7f}" for v in draws.tolist()))
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer)
    for step, rows in enumerate(batches(steps)):
        params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows],
                                             dropout_masks(step))
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
