"""The one-device example on DEVICES processes with Paddle's DataParallel, started by
``paddle.distributed.spawn`` (gloo on the CPU): the second step of the porting examples. Each
process trains on its part of every global batch; DataParallel averages the gradients, so
every step is the one-device step, and the losses printed (the mean of the processes' losses:
the global batch's) are single_paddle.py's.

    python examples/dp_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.distributed as dist
from data import DEVICES, LR, batches, initial_weights, make_data, shard
from single_paddle import Classifier, load, train_step


# --- the loop each process runs; spawn gives it its rank and the endpoints (127.0.0.1)
def worker(steps):
    paddle.set_device("cpu")
    dist.init_parallel_env()  # gloo on a CPU build
    model = Classifier()
    load(model, initial_weights())
    model = paddle.DataParallel(model)
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    train_loop(model, optimizer, dist.get_rank(), steps)


# --- data shard and step: each process its part of every global batch, the wrapped model's
# step on it; rank 0 prints the global batch's loss
def train_loop(model, optimizer, rank, steps):
    features, labels = make_data()
    world = dist.get_world_size()
    if rank == 0:
        print(f"devices {world}", flush=True)
    for step, rows in enumerate(batches(steps)):
        mine = shard(rows, rank, world)
        loss = paddle.to_tensor(train_step(model, optimizer, paddle.to_tensor(features[mine]),
                                           paddle.to_tensor(labels[mine])))
        dist.all_reduce(loss)  # the processes' mean losses, summed
        if rank == 0:
            print(f"step {step} loss {float(loss) / world:.7f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description="data-parallel training, Paddle DataParallel")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    dist.spawn(worker, args=(steps,), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
