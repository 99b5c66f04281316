"""The one-device example with momentum, resumable: the checkpoint step of the porting examples.
It trains to --steps, writing the model's and the optimizer's state with ``torch.save`` to
--dir at the end; started again with a larger --steps, it reads them back and goes on. The
momentum buffers are the state a resume must not lose: the losses after a resume equal the
uninterrupted run's, and the four frameworks' versions print the same ones.

    python examples/checkpoint_torch.py --steps 10 --dir /tmp/ckpt   # steps 0-9, then saved
    python examples/checkpoint_torch.py --steps 20 --dir /tmp/ckpt   # steps 10-19
"""

import argparse
from pathlib import Path

import torch
from data import LR, MOMENTUM, batches, initial_weights, make_data
from single_torch import Classifier, train_step


# --- checkpoint: every tensor of the training state, and the step it stopped after
def save(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, path)


def restore(path, model, optimizer):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def main():
    parser = argparse.ArgumentParser(description="resumable training, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    path = args.dir / "checkpoint.pt"
    features, labels = make_data()
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    start = restore(path, model, optimizer) if path.exists() else 0
    for step, rows in enumerate(batches(args.steps)):
        if step >= start:
            loss = train_step(model, optimizer, torch.from_numpy(features[rows]),
                              torch.from_numpy(labels[rows]))
            print(f"step {step} loss {loss:.7f}")
    args.dir.mkdir(parents=True, exist_ok=True)
    save(path, model, optimizer, max(start, args.steps))


if __name__ == "__main__":
    main()
