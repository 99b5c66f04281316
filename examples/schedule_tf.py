"""The one-device example with AdamW and a warm-up then cosine learning rate: the optimizer step
of the porting examples. The schedule is data.learning_rate; each framework's own scheduler
gives it, and every version prints the same rates and losses.

    python examples/schedule_tf.py
"""

import tensorflow as tf
from data import (
    PEAK_LR,
    SCHEDULE_STEPS,
    WARMUP,
    WEIGHT_DECAY,
    batches,
    initial_weights,
    make_data,
)
from single_tf import classifier, make_train_step


# --- optimizer: Keras' AdamW, its rate a schedule of the optimizer's own step count
# (``iterations``, 0 at the first update). CosineDecay's warm-up goes linearly from
# initial_learning_rate to warmup_target, then decays over decay_steps *after* the warm-up
def optimizer_and_schedule():
    schedule = tf.keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, decay_steps=SCHEDULE_STEPS - WARMUP, warmup_target=PEAK_LR,
        warmup_steps=WARMUP)
    return tf.keras.optimizers.AdamW(learning_rate=schedule, weight_decay=WEIGHT_DECAY), schedule


def main():
    features, labels = make_data()
    model = classifier(initial_weights())
    optimizer, schedule = optimizer_and_schedule()
    train_step = make_train_step(model, optimizer)
    for step, rows in enumerate(batches(SCHEDULE_STEPS)):
        rate = float(schedule(optimizer.iterations))
        loss = train_step(features[rows], labels[rows])
        print(f"step {step} lr {rate:.7f} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
