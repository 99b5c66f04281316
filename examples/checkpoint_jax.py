"""The one-device example with momentum, resumable: the checkpoint step of the porting examples.
It trains to --steps, writing the parameters, the optimizer state and the step with Orbax's
``StandardCheckpointer`` to --dir at the end; started again with a larger --steps, it reads
them back and goes on. The momentum (Optax's ``trace``) is the state a resume must not lose:
the losses after a resume equal the uninterrupted run's, and the four frameworks' versions
print the same ones.

    python examples/checkpoint_jax.py --steps 10 --dir /tmp/ckpt   # steps 0-9, then saved
    python examples/checkpoint_jax.py --steps 20 --dir /tmp/ckpt   # steps 10-19
"""

import argparse
from pathlib import Path

import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from data import LR, MOMENTUM, batches, initial_weights, make_data
from single_jax import make_train_step


# --- checkpoint: one pytree of the whole state. A restore takes the structure to fill (the
# freshly initialised state), and Orbax wants an absolute path
def save(folder, state):
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(folder.resolve() / "state", state, force=True)


def restore(folder, like):
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(folder.resolve() / "state", like)


def main():
    parser = argparse.ArgumentParser(description="resumable training, JAX")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    optimizer = optax.sgd(LR, momentum=MOMENTUM)
    state = {"params": params, "opt_state": optimizer.init(params), "step": jnp.asarray(0)}
    if (args.dir / "state").exists():
        state = restore(args.dir, state)
    start = int(state["step"])
    params, opt_state = state["params"], state["opt_state"]
    train_step = make_train_step(optimizer)
    for step, rows in enumerate(batches(args.steps)):
        if step >= start:
            params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows])
            print(f"step {step} loss {float(loss):.7f}")
    save(args.dir, {"params": params, "opt_state": opt_state,
                    "step": jnp.asarray(max(start, args.steps))})


if __name__ == "__main__":
    main()
