"""The data-parallel example with a BatchNorm whose batch statistics are taken over the global
batch, across the processes (nn.SyncBatchNorm under DataParallel, one GPU each, started by
``paddle.distributed.spawn``): the synchronized-BatchNorm step of the porting examples. On N
processes each sees 1/N of the batch, so a plain BatchNorm normalises each part with that
part's statistics; synchronized, they are the whole batch's, and the losses are one device's
(syncbn_tf.py --devices 1 prints them).

It needs DEVICES GPUs and refuses elsewhere: Paddle 3.3 has no CPU kernel for it ("The kernel
`sync_batch_norm` is not registered").

    python examples/syncbn_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from data import BN_EPSILON, DEVICES, HIDDEN, LR, initial_weights
from dp_paddle import train_loop
from single_paddle import Classifier, load


# --- model: a BatchNorm between the hidden layer and its ReLU; convert_sync_batchnorm swaps
# every BatchNorm for a SyncBatchNorm before DataParallel wraps the model
class NormalizedClassifier(Classifier):
    def __init__(self):
        super().__init__()
        self.norm = paddle.nn.BatchNorm1D(HIDDEN, epsilon=BN_EPSILON)

    def forward(self, x):
        return self.head(F.relu(self.norm(self.hidden(x))))


def normalized_classifier():
    model = NormalizedClassifier()
    load(model, initial_weights())  # the BatchNorm keeps its own: scale 1, shift 0
    return model


def synchronized_classifier():
    model = paddle.nn.SyncBatchNorm.convert_sync_batchnorm(normalized_classifier())
    return paddle.DataParallel(model)


# --- the loop each process runs; spawn gives it its rank and one GPU
def worker(steps):
    dist.init_parallel_env()  # NCCL between the GPUs
    model = synchronized_classifier()
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    train_loop(model, optimizer, dist.get_rank(), steps)  # dp_paddle.py's


def main():
    parser = argparse.ArgumentParser(description="synchronized BatchNorm, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    gpus = paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0
    if gpus < DEVICES:
        parser.exit(2, f"syncbn_paddle.py: {gpus} GPUs here, {DEVICES} needed: Paddle's "
                       "SyncBatchNorm has no CPU kernel\n")
    dist.spawn(worker, args=(steps,), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
