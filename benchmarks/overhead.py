"""Harness overhead per framework: the plainest training loop of that framework (the same model
builder, weights, batches, learning rates and thread settings, in a fresh process) against
`parbench run <framework>-single`, alternating rounds so that drift hits both sides.

    python benchmarks/overhead.py --framework torch|tensorflow|paddle|jax [--rounds 3]
                                  [--steps 60] [--threads N]

Prints one line per framework, ending in `harness overhead: +X.X%` (the median over rounds of
each side's median steady-state step time) and the 95% interval of the paired rounds' ratio.
Only the timed step is compared: a bare loop times what the worker times (host batch ->
framework tensors -> forward, loss, backward, update, loss read back to the host), so the
difference is what the harness adds inside the step.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from timing import BATCH, child_env, describe_rounds, parbench_run, step_ms

from parbench.base.devices import cpu_count
from parbench.contract.batches import schedule
from parbench.contract.data import load_synthetic
from parbench.contract.optim import OptimizerSpec, lr_at
from parbench.contract.spec import build_spec
from parbench.contract.weights import initial_weights
from parbench.results.metrics import warmup_steps

Step = Callable[[np.ndarray, np.ndarray, float], float]  # (x, y, lr) -> the step's loss
SINGLE = {"torch": "torch-single", "tensorflow": "tf-single", "paddle": "paddle-single",
          "jax": "jax-single"}


def batches(steps: int):
    """(model spec, weights, [(x, y, lr)] for each step), the contract's order and schedule."""
    data = load_synthetic()
    spec = build_spec("resnet", data.input_shape, data.holds["classes"])
    steps_data = [(np.asarray(data.x_train[s.indices]), np.asarray(data.y_train[s.indices]),
                   lr_at(s.index, steps, OptimizerSpec()))
                  for s in schedule(0, len(data.y_train), BATCH, steps)]
    return spec, initial_weights(spec, 0), steps_data


def bare_torch(spec, weights, threads: int) -> Step:
    import torch
    import torch.nn.functional as F

    from parbench.frameworks.torch.model import build_model

    torch.set_num_threads(threads)
    model = build_model(spec, weights).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)

    def step(x, y, lr):
        optimizer.param_groups[0]["lr"] = lr
        loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def bare_tensorflow(spec, weights, threads: int) -> Step:
    from parbench.frameworks.tensorflow.model import build_model
    from parbench.frameworks.tensorflow.optimizers import make_optimizer
    from parbench.frameworks.tensorflow.runtime import tf
    from parbench.frameworks.tensorflow.tasks import IMAGE_CLASSIFICATION

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    model = build_model(spec, weights)
    optimizer = make_optimizer(model, spec, OptimizerSpec())  # the shared rule (Keras' differs)

    @tf.function
    def step(x, y, lr):
        optimizer.learning_rate.assign(lr)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(IMAGE_CLASSIFICATION.per_example_loss(y, model(x, training=True)))
        optimizer.apply(tape.gradient(loss, model.trainable_variables),
                        model.trainable_variables)
        return loss

    return lambda x, y, lr: float(step(tf.constant(x), tf.constant(y),
                                       tf.constant(lr, tf.float32)))


def bare_paddle(spec, weights, threads: int) -> Step:
    import paddle
    import paddle.nn.functional as F

    from parbench.frameworks.paddle.model import build_model

    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(threads)
    model = build_model(spec, weights)
    model.train()
    optimizer = paddle.optimizer.Momentum(
        learning_rate=0.1, momentum=0.9, weight_decay=5e-4,
        parameters=[p for p in model.parameters() if p.trainable])

    def step(x, y, lr):
        optimizer.set_lr(lr)
        loss = F.cross_entropy(model(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        return float(loss)
    return step


def bare_jax(spec, weights, threads: int) -> Step:
    """One jitted step on one device: the loss's value_and_grad, the shared SGD rule, the
    BatchNorm statistics carried along (what jax-single's compiled step does, written plainly).
    PJRT_NPROC, the setting that bounds XLA's CPU pool, is read when the backend starts."""
    os.environ["PJRT_NPROC"] = str(threads)
    import jax
    import optax

    from parbench.contract.tasks import ImageClassification
    from parbench.frameworks.jax import model
    from parbench.frameworks.jax.optim import make_optimizer, with_learning_rate
    from parbench.frameworks.jax.tasks import loss_for

    params, stats = model.split_weights(spec, weights)
    optimizer = make_optimizer(spec, OptimizerSpec())
    loss_of = partial(model.loss_fn, spec, task=loss_for(ImageClassification(10)))

    @jax.jit
    def step(params, stats, opt_state, x, y, lr):
        (loss, stats), grads = jax.value_and_grad(loss_of, has_aux=True)(params, stats, x, y)
        updates, opt_state = optimizer.update(grads, with_learning_rate(opt_state, lr), params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    opt_state = optimizer.init(params)

    def take(x, y, lr):
        nonlocal params, stats, opt_state
        params, stats, opt_state, loss = step(params, stats, opt_state, x, y, np.float32(lr))
        return float(loss)
    return take


def timed(step: Step, x: np.ndarray, y: np.ndarray, lr: float) -> tuple[float, float]:
    """(the step's wall time: host batch in, loss read back to the host; its loss)."""
    start = time.perf_counter()
    loss = step(x, y, lr)
    return time.perf_counter() - start, loss


def step_times(step: Step, feed) -> list[float]:
    return [timed(step, x, y, lr)[0] for x, y, lr in feed]


BARE = {"torch": bare_torch, "tensorflow": bare_tensorflow, "paddle": bare_paddle,
        "jax": bare_jax}


def bare_in_fresh_process(framework: str, steps: int, threads: int) -> float:
    done = subprocess.run([sys.executable, __file__, "--bare-child", "--framework", framework,
                           "--steps", str(steps), "--threads", str(threads)], check=True,
                          capture_output=True, text=True, env=child_env(threads))
    return float(done.stdout.strip().splitlines()[-1])


def paired_interval(bare: list[float], harness: list[float], resamples: int = 10_000,
                    seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval, in per cent, of the overhead as the geometric mean of each
    round's harness / bare ratio: the two sides of a round run back to back, so the machine's
    drift between rounds (here rounds' medians spread by +-15%) cancels in the ratio. A bar
    of 2% is met only when the interval's upper end is under it; with few rounds the interval
    is wide, and then nothing is shown either way."""
    logs = np.log(np.asarray(harness) / np.asarray(bare))
    picks = np.random.default_rng(seed).integers(0, len(logs), (resamples, len(logs)))
    low, high = np.percentile(logs[picks].mean(axis=1), [2.5, 97.5])
    return 100 * (np.exp(low) - 1), 100 * (np.exp(high) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(BARE), action="append",
                        help="repeatable; default: all four")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=cpu_count())
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    frameworks = args.framework or sorted(BARE)
    if args.bare_child:
        spec, weights, feed = batches(args.steps)
        times = step_times(BARE[frameworks[0]](spec, weights, args.threads), feed)
        print(float(np.median(times[warmup_steps(args.steps):]) * 1000))
        return
    for framework in frameworks:
        bare, harness = [], []
        for _ in range(args.rounds):
            bare.append(bare_in_fresh_process(framework, args.steps, args.threads))
            harness.append(step_ms(parbench_run(SINGLE[framework], args.steps,
                                                "--threads", str(args.threads))))
        b, h = float(np.median(bare)), float(np.median(harness))
        low, high = paired_interval(bare, harness)
        print(f"{framework}: bare {b:.1f} ms/step ({describe_rounds(bare)}), "
              f"{SINGLE[framework]} {h:.1f} ms/step ({describe_rounds(harness)}), "
              f"harness overhead: {100 * (h - b) / b:+.1f}% (paired rounds: 95% interval "
              f"{low:+.1f}% to {high:+.1f}%)", flush=True)


if __name__ == "__main__":
    main()
