"""The one-device example with AdamW and a warm-up then cosine learning rate: the optimizer step
of the porting examples. The schedule is data.learning_rate; each framework's own scheduler
gives it, and every version prints the same rates and losses.

    python examples/schedule_paddle.py
"""

import paddle
from data import (
    PEAK_LR,
    SCHEDULE_STEPS,
    WARMUP,
    WEIGHT_DECAY,
    batches,
    initial_weights,
    make_data,
)
from single_paddle import Classifier, load, train_step


# --- optimizer: Paddle's AdamW, its rate a scheduler object stepped by hand after each update.
# LinearWarmup runs its own ramp for warmup_steps, then the wrapped CosineAnnealingDecay from
# its own step 0
def optimizer_and_schedule(model):
    schedule = paddle.optimizer.lr.LinearWarmup(
        learning_rate=paddle.optimizer.lr.CosineAnnealingDecay(PEAK_LR,
                                                               T_max=SCHEDULE_STEPS - WARMUP),
        warmup_steps=WARMUP, start_lr=0.0, end_lr=PEAK_LR)
    optimizer = paddle.optimizer.AdamW(learning_rate=schedule, weight_decay=WEIGHT_DECAY,
                                       parameters=model.parameters())
    return optimizer, schedule


def main():
    paddle.set_device("cpu")
    features, labels = make_data()
    model = Classifier()
    load(model, initial_weights())
    optimizer, schedule = optimizer_and_schedule(model)
    for step, rows in enumerate(batches(SCHEDULE_STEPS)):
        rate = optimizer.get_lr()
        loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                          paddle.to_tensor(labels[rows]))
        schedule.step()  # after the optimizer's step: the rate of the next one
        print(f"step {step} lr {rate:.7f} loss {loss:.7f}")


if __name__ == "__main__":
    main()
