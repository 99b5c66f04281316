"""The one-device example with AdamW and a warm-up then cosine learning rate: the optimizer step
of the porting examples. The schedule is data.learning_rate; each framework's own scheduler
gives it, and every version prints the same rates and losses.

    python examples/schedule_torch.py
"""

import torch
from data import (
    PEAK_LR,
    SCHEDULE_STEPS,
    WEIGHT_DECAY,
    batches,
    initial_weights,
    learning_rate,
    make_data,
)
from single_torch import Classifier, train_step


# --- optimizer: torch's AdamW (decoupled decay, eps outside the root of the bias-corrected v),
# its rate a multiple of the base one that LambdaLR sets before each step. LinearLR cannot
# start the warm-up at 0: its start_factor must be above 0
def optimizer_and_schedule(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=WEIGHT_DECAY)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                 lambda step: learning_rate(step) / PEAK_LR)
    return optimizer, schedule


def main():
    features, labels = make_data()
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer, schedule = optimizer_and_schedule(model)
    for step, rows in enumerate(batches(SCHEDULE_STEPS)):
        rate = optimizer.param_groups[0]["lr"]
        loss = train_step(model, optimizer, torch.from_numpy(features[rows]),
                          torch.from_numpy(labels[rows]))
        schedule.step()  # after the optimizer's step: the rate of the next one
        print(f"step {step} lr {rate:.7f} loss {loss:.7f}")


if __name__ == "__main__":
    main()
