"""Train a small classifier on one device with JAX: the first step of the porting examples.

It imports JAX and examples/data.py (numpy only), nothing of parbench: the data, the initial
weights and the batch order come from there, as in the PyTorch, TensorFlow and Paddle versions
beside this file, so all four print the same losses (to float32 rounding).

    python examples/single_jax.py [--steps 20]
"""

import argparse

import jax
import jax.numpy as jnp
import optax
from data import LR, batches, initial_weights, make_data


# --- model: a pure function of a dict of arrays, kept in torch's [out, in] layout
def forward(params, x):
    hidden = jax.nn.relu(x @ params["hidden.weight"].T + params["hidden.bias"])
    return hidden @ params["head.weight"].T + params["head.bias"]


def loss_fn(params, x, y, forward=forward):
    logits = forward(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


# --- step: one compiled function, the state passed in and returned (nothing is mutated);
# another model is another forward function, passed in
def make_train_step(optimizer, forward=forward):
    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, forward)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return train_step


def main():
    parser = argparse.ArgumentParser(description="one-device training, JAX")
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
        params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
