"""The one-device example with AdamW and a warm-up then cosine learning rate: the optimizer step
of the porting examples. The schedule is data.learning_rate; each framework's own scheduler
gives it, and every version prints the same rates and losses.

    python examples/schedule_jax.py
"""

import jax.numpy as jnp
import optax
from data import (
    PEAK_LR,
    SCHEDULE_STEPS,
    WARMUP,
    WEIGHT_DECAY,
    batches,
    initial_weights,
    make_data,
)
from single_jax import make_train_step


# --- optimizer: Optax's adamw with a schedule, a function of the update count it keeps in its
# state. warmup_cosine_decay_schedule's decay_steps include the warm-up (Keras' do not)
def optimizer_and_schedule():
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=PEAK_LR, warmup_steps=WARMUP, decay_steps=SCHEDULE_STEPS,
        end_value=0.0)
    return optax.adamw(schedule, weight_decay=WEIGHT_DECAY), schedule


def main():
    features, labels = make_data()
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    optimizer, schedule = optimizer_and_schedule()
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer)
    for step, rows in enumerate(batches(SCHEDULE_STEPS)):
        params, opt_state, loss = train_step(params, opt_state, features[rows], labels[rows])
        print(f"step {step} lr {float(schedule(step)):.7f} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
