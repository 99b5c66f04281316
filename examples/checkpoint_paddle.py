"""The one-device example with momentum, resumable: the checkpoint step of the porting examples.
It trains to --steps, writing the model's and the optimizer's state dicts with ``paddle.save``
to --dir at the end; started again with a larger --steps, it reads them back and goes on. The
momentum buffers are the state a resume must not lose: the losses after a resume equal the
uninterrupted run's, and the four frameworks' versions print the same ones.

    python examples/checkpoint_paddle.py --steps 10 --dir /tmp/ckpt   # steps 0-9, then saved
    python examples/checkpoint_paddle.py --steps 20 --dir /tmp/ckpt   # steps 10-19
"""

import argparse
from pathlib import Path

import paddle
from data import LR, MOMENTUM, batches, initial_weights, make_data
from single_paddle import Classifier, load, train_step


# --- checkpoint: the state dicts, and the step it stopped after (paddle.save pickles any of them)
def save(folder, model, optimizer, step):
    paddle.save(model.state_dict(), str(folder / "model.pdparams"))
    paddle.save(optimizer.state_dict(), str(folder / "optimizer.pdopt"))
    paddle.save({"step": step}, str(folder / "step.pdstate"))


def restore(folder, model, optimizer):
    model.set_state_dict(paddle.load(str(folder / "model.pdparams")))
    optimizer.set_state_dict(paddle.load(str(folder / "optimizer.pdopt")))
    return paddle.load(str(folder / "step.pdstate"))["step"]


def main():
    parser = argparse.ArgumentParser(description="resumable training, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    paddle.set_device("cpu")
    features, labels = make_data()
    model = Classifier()
    load(model, initial_weights())
    optimizer = paddle.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM,
                                          parameters=model.parameters())
    start = restore(args.dir, model, optimizer) if (args.dir / "step.pdstate").exists() else 0
    for step, rows in enumerate(batches(args.steps)):
        if step >= start:
            loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                              paddle.to_tensor(labels[rows]))
            print(f"step {step} loss {loss:.7f}")
    args.dir.mkdir(parents=True, exist_ok=True)
    save(args.dir, model, optimizer, max(start, args.steps))


if __name__ == "__main__":
    main()
