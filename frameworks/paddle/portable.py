"""Paddle's training state as a portable checkpoint's (parbench.run.portable), and back.

Paddle's optimizers keep the contract's quantities under names of their own, one accumulator
per parameter keyed by the parameter's unique name (``linear_3.w_0_velocity_0``):
``Momentum``'s ``velocity`` is torch's momentum buffer (``buf = momentum * buf + g``: see
optim.py), ``AdamW``'s ``moment1`` and ``moment2`` are
``exp_avg`` and ``exp_avg_sq``. Paddle keeps no step count: AdamW's bias correction reads
``beta1_pow_acc`` and ``beta2_pow_acc``, float32 products that hold beta^(t+1) after t steps
(measured: 0.9^3 = 0.729 after 2 steps), so a load writes beta^(t+1) for the checkpoint's t,
and an export checks the products against the checkpoint's step instead of deriving t from
them (float32's beta2^t underflows to 0 after about 100,000 steps, beta1^t after about 850).
A slot of an ``nn.Linear`` weight is [in, out] like its weight, transposed like it.

Before the first step the accumulators do not exist: ``set_state_dict`` keeps the state aside
and ``state_dict`` returns it, which is what a resumed run's load and a conversion's export
both see.
"""

from __future__ import annotations

import numpy as np
import paddle
from paddle import nn

from parbench.contract.optim import OptimizerSpec
from parbench.run.portable import SLOTS, TrainingState

from .model import canonical, export_weights, paddle_state

ACCUMULATORS = {"momentum_buffer": "velocity_0", "exp_avg": "moment1_0",
                "exp_avg_sq": "moment2_0"}
POWERS = {"beta1_pow_acc_0": "beta1", "beta2_pow_acc_0": "beta2"}  # AdamW's, -> the beta


def _trained(module: nn.Layer) -> dict[str, str]:
    """Each trainable parameter's structured name -> its unique name (the optimizer's key)."""
    return {name: p.name for name, p in module.named_parameters() if p.trainable}


def portable_state(module: nn.Layer, optimizer: paddle.optimizer.Optimizer,
                   rule: OptimizerSpec, step: int) -> TrainingState:
    """The state after ``step`` steps: the weights and every slot of the rule, canonical."""
    state, trained = optimizer.state_dict(), _trained(module)
    if rule.name == "adamw":
        _check_powers(state, trained, rule, step)
    slots = {slot: canonical(module, ((name, state[f"{unique}_{ACCUMULATORS[slot]}"])
                                      for name, unique in trained.items()))
             for slot in SLOTS[rule.name]}
    return TrainingState(export_weights(module), slots, step)


def _check_powers(state: dict, trained: dict[str, str], rule: OptimizerSpec, step: int) -> None:
    for unique in trained.values():
        for accumulator, beta in POWERS.items():
            held = float(state[f"{unique}_{accumulator}"].numpy()[0])
            expected = getattr(rule, beta) ** (step + 1)
            if not np.isclose(held, expected, rtol=1e-4, atol=1e-37):
                raise ValueError(f"Paddle's {unique}_{accumulator} is {held}; after the "
                                 f"checkpoint's {step} steps it would be {expected}")


def load_portable(module: nn.Layer, optimizer: paddle.optimizer.Optimizer, rule: OptimizerSpec,
                  state: TrainingState) -> None:
    """``state`` into the Layer and, by each parameter's unique name, the optimizer (before
    its first step: its accumulators take these values when the step creates them)."""
    module.set_state_dict(paddle_state(module, state.weights))
    trained, accumulators = _trained(module), {}
    for slot, arrays in state.slots.items():
        for name, tensor in paddle_state(module, arrays).items():
            accumulators[f"{trained[name]}_{ACCUMULATORS[slot]}"] = tensor
    if rule.name == "adamw":
        for unique in trained.values():
            for accumulator, beta in POWERS.items():
                power = np.array([getattr(rule, beta) ** (state.step + 1)], np.float32)
                accumulators[f"{unique}_{accumulator}"] = paddle.to_tensor(power)
    optimizer.set_state_dict(accumulators)
