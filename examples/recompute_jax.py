"""The one-device example with the hidden block's activations recomputed in the backward pass
instead of kept (activation checkpointing): the recomputation step of the porting examples. It
trades compute for memory and changes no number, so the losses printed are single_jax.py's; the
script also prints whether the gradient's program holds the recomputation (a remat).

    python examples/recompute_jax.py [--steps 20]
"""

import argparse
from functools import partial

import jax
import jax.numpy as jnp
import optax
from data import LR, batches, initial_weights, make_data
from single_jax import loss_fn, make_train_step


# --- model: jax.checkpoint marks the block; jax.grad then recomputes it instead of keeping it.
# The step is single_jax.py's, given this forward
@jax.checkpoint
def hidden_block(weight, bias, x):
    return jax.nn.relu(x @ weight.T + bias)


def forward(params, x):
    hidden = hidden_block(params["hidden.weight"], params["hidden.bias"], x)
    return hidden @ params["head.weight"].T + params["head.bias"]


def main():
    parser = argparse.ArgumentParser(description="activation checkpointing, JAX")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer, forward)
    for step, rows in enumerate(batches(steps)):
        params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")
    gradient = jax.grad(partial(loss_fn, forward=forward))
    program = jax.make_jaxpr(gradient)(params, features[rows], labels[rows])
    print(f"remat in the gradient {'remat' in str(program)}")


if __name__ == "__main__":
    main()
