"""TensorFlow's training state as a portable checkpoint's (parbench.run.portable), and back.

The shared rules' optimizers (optimizers.py) keep the contract's quantities already: SGD's
``buffers`` are torch's momentum buffers (not Keras SGD's ``v = momentum * v - lr * g``, which
the TensorFlow backends do not use), AdamW's ``m`` and ``v`` are torch's ``exp_avg`` and
``exp_avg_sq``, and the step count t is the optimizer's ``iterations`` (its update takes
``iterations + 1``). What differs is the layout: each slot is its variable's shape, so a conv
kernel's slots are HWIO and a dense kernel's [in, out], transposed like the weights
(model.to_canonical_layout, to_tf_layout). A slot is found by its variable's index in the
optimizer, the lookup Keras' own ``update_step`` makes.

Assigning a numpy value to a mirrored variable outside a replica context writes every
replica's copy, so one load serves every strategy, on each worker of MultiWorkerMirrored
alike.
"""

from __future__ import annotations

import numpy as np

from parbench.contract.spec import ModelSpec, parameters
from parbench.run.portable import SLOTS, TrainingState

from .model import export_weights, to_canonical_layout, to_tf_layout
from .tfkeras import keras

# the portable slot -> the attribute of the shared rule's optimizer holding it, per variable
SLOT_LISTS = {"momentum_buffer": "buffers", "exp_avg": "m", "exp_avg_sq": "v"}


def _slot_variables(model: keras.Model, optimizer: keras.optimizers.Optimizer, slot: str
                    ) -> dict:
    """Each trainable canonical tensor's variable of ``slot`` in ``optimizer`` (the rule's
    own, inside fp16's loss-scale wrapper)."""
    rule = getattr(optimizer, "inner_optimizer", optimizer)
    per_variable = getattr(rule, SLOT_LISTS[slot])
    return {name: per_variable[rule._get_variable_index(variable)]
            for name, variable in model.canonical_variables().items() if variable.trainable}


def portable_state(model: keras.Model, optimizer: keras.optimizers.Optimizer, spec: ModelSpec,
                   rule: str, step: int) -> TrainingState:
    """The state after ``step`` steps: the weights and every slot of the rule, canonical."""
    taken = int(optimizer.iterations.numpy())
    if taken != step:
        raise ValueError(f"TensorFlow's optimizer has taken {taken} steps; the checkpoint "
                         f"says {step}")
    roles = parameters(spec)
    slots = {slot: {name: to_canonical_layout(np.array(variable.numpy()), roles[name].role)
                    for name, variable in _slot_variables(model, optimizer, slot).items()}
             for slot in SLOTS[rule]}
    return TrainingState(export_weights(model, spec), slots, step)


def load_portable(model: keras.Model, optimizer: keras.optimizers.Optimizer, spec: ModelSpec,
                  state: TrainingState) -> None:
    """``state`` into the model's variables, the optimizer's slots and its step count."""
    roles = parameters(spec)
    for name, variable in model.canonical_variables().items():
        variable.assign(to_tf_layout(state.weights[name], roles[name].role))
    for slot, tensors in state.slots.items():
        for name, variable in _slot_variables(model, optimizer, slot).items():
            variable.assign(to_tf_layout(tensors[name], roles[name].role))
    optimizer.iterations.assign(state.step)
