"""The one-device example computing in bfloat16 (mixed precision): the precision step of the
porting examples. The weights and the optimizer stay float32; the forward runs under
paddle.amp.auto_cast, which computes the products in bfloat16, and the loss in float32.

On a CPU this refuses: Paddle 3.3's auto_cast is enabled on CUDA, XPU and custom devices only.
On the CPU it warns and computes everything in float32, so a run would print float32's losses
under a bfloat16 label. The script asks auto_cast what it gives before training, and refuses
when that is not bfloat16. On a GPU it runs, and prints the logits' dtype first.

    python examples/bf16_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.nn.functional as F
from data import LR, batches, initial_weights, make_data
from single_paddle import Classifier, load


# --- step: auto_cast around the forward and the loss only; backward() and step() outside it
def train_step(model, optimizer, x, y):
    with paddle.amp.auto_cast(dtype="bfloat16"):
        loss = F.cross_entropy(model(x).astype("float32"), y)
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
    return float(loss)


def logits_dtype(model, x):
    with paddle.amp.auto_cast(dtype="bfloat16"):
        return model(x).dtype


def main():
    parser = argparse.ArgumentParser(description="bfloat16 mixed precision, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = Classifier()
    load(model, initial_weights())
    dtype = logits_dtype(model, paddle.to_tensor(features[:1]))
    if dtype != paddle.bfloat16:
        parser.exit(2, f"bf16_paddle.py: auto_cast computes in {dtype} on "
                       f"{paddle.device.get_device()}, not bfloat16 (Paddle's mixed precision "
                       "runs on CUDA, XPU and custom devices only): run this on a GPU\n")
    print(f"logits {dtype}")
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    for step, rows in enumerate(batches(steps)):
        loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                          paddle.to_tensor(labels[rows]))
        print(f"step {step} loss {loss:.7f}")


if __name__ == "__main__":
    main()
