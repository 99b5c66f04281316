"""The one-device example with dropout on the hidden layer: the random-numbers step of the
porting examples. The masks come from numpy (data.dropout_masks: one per row of each global
batch, from the seed and the step), not from Paddle's generator, so every framework drops the
same units and prints the same losses. Paddle's own generator, seeded alike, draws other
numbers than the other frameworks' (the script prints its first draws).

    python examples/dropout_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.nn.functional as F
from data import LR, batches, dropout_masks, initial_weights, make_data
from single_paddle import Classifier, load


# --- model: the hidden layer's output times the step's mask (what nn.Dropout draws itself)
class DropoutClassifier(Classifier):
    def forward(self, x, mask):
        return self.head(F.relu(self.hidden(x)) * mask)


# --- step
def train_step(model, optimizer, x, y, mask):
    loss = F.cross_entropy(model(x, mask), y)
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
    return float(loss)


def main():
    parser = argparse.ArgumentParser(description="dropout from host masks, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    paddle.set_device("cpu")
    paddle.seed(0)
    print("own draws", " ".join(f"{v:.7f}" for v in paddle.rand([3]).numpy().tolist()))
    features, labels = make_data()
    model = DropoutClassifier()
    load(model, initial_weights())
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    for step, rows in enumerate(batches(steps)):
        loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                          paddle.to_tensor(labels[rows]), paddle.to_tensor(dropout_masks(step)))
        print(f"step {step} loss {loss:.7f}")


if __name__ == "__main__":
    main()
