"""The one-device example with the model compiled (torch.compile: TorchDynamo captures the
forward as a graph, Inductor generates its code): the compilation step of the porting examples.
The first step compiles, later ones reuse the code, and the numbers are the eager model's, so
the losses printed are single_torch.py's (to float32 rounding); the script then prints how many
graphs were compiled.

    python examples/compile_torch.py [--steps 20]
"""

import argparse

import torch
from data import LR, batches, initial_weights, make_data
from single_torch import Classifier, train_step


# --- model: compile the module (the optimizer keeps the module's own parameters); under DDP,
# compile the DDP-wrapped model, and keep the model a Module subclass of your own: a bare
# nn.Sequential under DDP runs eagerly, without an error
def compiled_classifier():
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    return model, torch.compile(model)


def main():
    parser = argparse.ArgumentParser(description="compilation, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model, compiled = compiled_classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, rows in enumerate(batches(steps)):
        loss = train_step(compiled, optimizer, torch.from_numpy(features[rows]),
                          torch.from_numpy(labels[rows]))
        print(f"step {step} loss {loss:.7f}")
    # what Dynamo captured: 0 would mean the model ran eagerly all along
    print(f"graphs compiled {torch._dynamo.utils.counters['stats']['unique_graphs']}")


if __name__ == "__main__":
    main()
