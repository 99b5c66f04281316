"""The one-device example computing in bfloat16 (mixed precision): the precision step of the
porting examples. The weights and the optimizer stay float32; the forward casts the weights and
the input to bfloat16 and computes in it, and the loss is taken in float32. JAX has no autocast:
the casts are the code's own (jmp, Flax's dtype= and param_dtype= do the same). The losses
printed follow single_jax.py's to bfloat16's rounding; the script prints the logits' dtype
first.

    python examples/bf16_jax.py [--steps 20]
"""

import argparse

import jax
import jax.numpy as jnp
import optax
from data import LR, batches, initial_weights, make_data
from single_jax import forward, make_train_step


# --- model: single_jax.py's forward on bfloat16 copies; the gradient flows back through the
# casts, so it arrives in float32 for the float32 weights. The loss takes the logits in float32;
# the step is single_jax.py's, given that forward
def bf16_logits(params, x):
    return forward(jax.tree.map(lambda p: p.astype(jnp.bfloat16), params),
                   x.astype(jnp.bfloat16))


def float32_loss_logits(params, x):
    return bf16_logits(params, x).astype(jnp.float32)


def main():
    parser = argparse.ArgumentParser(description="bfloat16 mixed precision, JAX")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    print(f"logits {bf16_logits(params, features[:1]).dtype}")
    optimizer = optax.sgd(LR)
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer, float32_loss_logits)
    for step, rows in enumerate(batches(steps)):
        params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
