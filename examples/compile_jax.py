"""The one-device example, looking at what jax.jit compiles: the compilation step of the
porting examples. Every JAX example already compiles its step (single_jax.py's jax.jit): JAX
traces the function once per input shape and dtype, and XLA compiles each trace. The losses
printed are single_jax.py's; the script then prints how many programs the step holds after
training on full batches (1), and after one call with a smaller batch (2: a new shape, a new
compilation, which is why the batches leave each epoch's tail out).

    python examples/compile_jax.py [--steps 20]
"""

import argparse
import logging

import jax
import jax.numpy as jnp
import optax
from data import LR, batches, initial_weights, make_data
from single_jax import make_train_step


# --- step: single_jax.py's; jax_log_compiles logs each compilation (at WARNING, so it shows
# on stderr too), which is how to find a step that compiles again
class Compilations(logging.Handler):
    """Counts the compilations of the jitted function ``name``."""

    def __init__(self, name):
        super().__init__()
        self.name, self.count = name, 0

    def emit(self, record):
        self.count += record.getMessage().startswith(f"Compiling jit({self.name})")


def main():
    parser = argparse.ArgumentParser(description="compilation, JAX")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)
    compilations = Compilations("train_step")
    logging.getLogger("jax").addHandler(compilations)
    jax.config.update("jax_log_compiles", True)
    train_step = make_train_step(optimizer)
    for step, rows in enumerate(batches(steps)):
        params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")
    full = compilations.count
    train_step(params, opt_state, features[rows[:16]], labels[rows[:16]])  # a new shape
    print(f"programs compiled {full}, then {compilations.count} after a batch of 16")


if __name__ == "__main__":
    main()
