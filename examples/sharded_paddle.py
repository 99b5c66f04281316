"""The data-parallel example with every parameter sharded over the DEVICES processes (Paddle's
group_sharded_parallel at level p_g_os: parameters, gradients and optimizer state, ZeRO-3), one
GPU each, started by ``paddle.distributed.spawn``: the sharded step of the porting examples.
The arithmetic is the one-device step's, so the losses printed are single_paddle.py's.

It needs DEVICES GPUs and refuses elsewhere: group_sharded_parallel asserts a GPU or XPU place
(Paddle 3.3), so on a CPU the sharding cannot be built at all.

    python examples/sharded_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.distributed as dist
from data import DEVICES, LR, initial_weights
from dp_paddle import train_loop
from paddle.distributed.sharding import group_sharded_parallel
from single_paddle import Classifier, load


# --- the loop each process runs; spawn gives it its rank and one GPU
def worker(steps):
    dist.init_parallel_env()  # NCCL between the GPUs
    model = Classifier()
    load(model, initial_weights())
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    # --- model: the layer and its optimizer are sharded together, once the optimizer exists
    model, optimizer, _ = group_sharded_parallel(model, optimizer, level="p_g_os")
    train_loop(model, optimizer, dist.get_rank(), steps)  # dp_paddle.py's


def main():
    parser = argparse.ArgumentParser(description="sharded data parallelism, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    gpus = paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0
    if gpus < DEVICES:
        parser.exit(2, f"sharded_paddle.py: {gpus} GPUs here, {DEVICES} needed: Paddle's "
                       "group_sharded_parallel asserts a GPU or XPU place and cannot shard on "
                       "a CPU\n")
    dist.spawn(worker, args=(steps,), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
