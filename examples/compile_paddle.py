"""The one-device example with the forward compiled to a static program
(paddle.jit.to_static): the compilation step of the porting examples. Paddle traces the
forward into a program of its own operators and runs that; the backward and the optimizer stay
in dynamic mode. The numbers are dynamic mode's, so the losses printed are single_paddle.py's
(to float32 rounding); the script then prints how many operators the forward's program has.

    python examples/compile_paddle.py [--steps 20]
"""

import argparse

import paddle
from data import LR, batches, initial_weights, make_data
from single_paddle import Classifier, load, train_step


# --- model: to_static on the forward only: around loss.backward() it fails. Under
# DataParallel, wrap the static model (DataParallel(to_static(m))): the other order fails
def compiled_classifier():
    model = Classifier()
    load(model, initial_weights())
    return paddle.jit.to_static(model, full_graph=True)


def main():
    parser = argparse.ArgumentParser(description="compilation, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    paddle.set_device("cpu")
    features, labels = make_data()
    model = compiled_classifier()
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    for step, rows in enumerate(batches(steps)):
        loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                          paddle.to_tensor(labels[rows]))
        print(f"step {step} loss {loss:.7f}")
    program = model.forward.concrete_program.main_program
    print(f"static program operators {len(program.global_block().ops)}")


if __name__ == "__main__":
    main()
