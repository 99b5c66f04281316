"""The one-device example with the hidden block's activations recomputed in the backward pass
instead of kept (activation checkpointing): the recomputation step of the porting examples. It
trades compute for memory and changes no number, so the losses printed are single_paddle.py's;
the script also prints how many times the block ran in the last step (2: the forward, and again
in the backward).

    python examples/recompute_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.nn.functional as F
from data import LR, batches, initial_weights, make_data
from paddle.distributed.fleet.utils import recompute
from single_paddle import Classifier, load, train_step


# --- model: use_reentrant=False, since the block's input (the data) needs no gradient. The
# reentrant variant (Paddle 3.3's default) then runs the block once and keeps its activations
class RecomputedClassifier(Classifier):
    block_runs = 0

    def hidden_block(self, x):
        self.block_runs += 1
        return F.relu(self.hidden(x))

    def forward(self, x):
        return self.head(recompute(self.hidden_block, x, use_reentrant=False))


def main():
    parser = argparse.ArgumentParser(description="activation checkpointing, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    paddle.set_device("cpu")
    features, labels = make_data()
    model = RecomputedClassifier()
    load(model, initial_weights())
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    for step, rows in enumerate(batches(steps)):
        model.block_runs = 0
        loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                          paddle.to_tensor(labels[rows]))
        print(f"step {step} loss {loss:.7f}")
    print(f"block runs per step {model.block_runs}")


if __name__ == "__main__":
    main()
