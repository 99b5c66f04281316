"""The spec's models as pure JAX functions over the canonical weights (no flax, no optax).

The ResNet and the MLP are here, the vision transformer in vit.py and the causal language model
in gpt.py (on the ViT's blocks), all built on the shared layers of layers.py (canonical layouts,
NCHW activations, no transposes, ``PRECISION``); ``FORWARDS`` picks one by ``spec.kind``.
``loss_fn`` and ``evaluate`` put a forward in front of the run's task (tasks.py: the loss and the
evaluation's outputs, written once per task).

Being functional, a model keeps no state: BatchNorm's running statistics (``Stats``) are an
input of ``apply`` and, in training mode, an output, the updated values (torch's convention,
see ``batch_norm``). Everything here is traceable: ``spec`` (a frozen dataclass: hashable),
``train``, ``sync_axis`` and ``task`` are the static arguments of a jit / pmap / shard_map
around it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from parbench.contract.spec import (
    BatchNormSpec,
    MLPSpec,
    ModelSpec,
    ResNetSpec,
    kind_of,
    parameters,
    resnet_blocks,
)
from parbench.contract.weights import check_weights

from . import gpt, vit
from .layers import Params, Stats, conv2d, dense
from .tasks import TaskLoss

TRACKED = ".num_batches_tracked"  # torch's BatchNorm counter: accepted, counted, not required
TRACKED_DTYPE = np.int64  # torch's; jax without x64 holds it as int32


# --- BatchNorm: the ResNet's own layer (conv2d and dense, shared with vit.py, are in layers.py)
def _channels(vector: jax.Array) -> jax.Array:
    return vector.reshape(1, -1, 1, 1)  # a per-channel vector against NCHW


def _moments(x: jax.Array, sync_axis: str | None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-channel mean, sum of squared deviations and row count of an NCHW batch; with
    ``sync_axis`` over every device's rows on that axis (exact: each device's sums are added
    with ``psum``, and the deviations are taken from the global mean, so nothing depends on
    the split). Two passes, like torch's CPU kernel: a mean of squares minus the squared mean
    cancels digits when the mean is large against the spread (the parity batch shifted by +10:
    running variances 2.5e-6 from torch that way, 8.4e-8 this way). Under ``sync_axis`` that
    costs two all-reduces per layer instead of one."""
    axes = (0, 2, 3)
    count = jnp.asarray(x.shape[0] * x.shape[2] * x.shape[3], jnp.float32)
    total = jnp.sum(x, axes)
    if sync_axis is not None:
        total, count = lax.psum((total, count), sync_axis)
    mean = total / count
    squares = jnp.sum(jnp.square(x - _channels(mean)), axes)
    if sync_axis is not None:
        squares = lax.psum(squares, sync_axis)
    return mean, squares, count


def batch_norm(x: jax.Array, params: Params, stats: Stats, prefix: str, norm: BatchNormSpec,
               train: bool, sync_axis: str | None, updated: Stats) -> jax.Array:
    """The spec's BatchNorm (torch's ``BatchNorm2d``): in training, normalise with the batch
    mean and *biased* variance and write the new running statistics into ``updated``,
    ``running = (1 - momentum) * running + momentum * batch`` with the *unbiased* batch
    variance (the global batch's, with the global count, under ``sync_axis``: synchronized
    BatchNorm); in inference, normalise with the running statistics."""
    mean_name, var_name = f"{prefix}.running_mean", f"{prefix}.running_var"
    if train:
        mean, squares, count = _moments(x, sync_axis)
        var = squares / count
        m = norm.momentum
        updated[mean_name] = (1 - m) * stats[mean_name] + m * lax.stop_gradient(mean)
        unbiased = lax.stop_gradient(squares / (count - 1))
        updated[var_name] = (1 - m) * stats[var_name] + m * unbiased
        if prefix + TRACKED in stats:
            updated[prefix + TRACKED] = stats[prefix + TRACKED] + 1
    else:
        mean, var = stats[mean_name], stats[var_name]
    scale = params[f"{prefix}.weight"] * lax.rsqrt(var + norm.eps)
    return (x - _channels(mean)) * _channels(scale) + _channels(params[f"{prefix}.bias"])


# --- models: (spec, params, stats, x, train, sync_axis) -> (logits, stats)
def _conv_norm(spec: ResNetSpec, params: Params, stats: Stats, x: jax.Array, prefix: str,
               stride: int, train: bool, sync_axis: str | None, updated: Stats) -> jax.Array:
    """conv (bias only without norm; 3x3 pads 1, 1x1 pads 0), then the spec's BatchNorm."""
    weight = params[f"{prefix}.conv.weight"]
    x = conv2d(x, weight, stride, weight.shape[-1] // 2)
    if spec.norm is None:
        return x + _channels(params[f"{prefix}.conv.bias"])
    return batch_norm(x, params, stats, f"{prefix}.bn", spec.norm, train, sync_axis, updated)


def _resnet(spec: ResNetSpec, params: Params, stats: Stats, x: jax.Array, train: bool,
            sync_axis: str | None) -> tuple[jax.Array, Stats]:
    updated: Stats = {}

    def conv_norm(x: jax.Array, prefix: str, stride: int) -> jax.Array:
        return _conv_norm(spec, params, stats, x, prefix, stride, train, sync_axis, updated)

    x = jax.nn.relu(conv_norm(x, "stem", 1))
    for name, _c_in, _c_out, stride, projection in resnet_blocks(spec):
        out = conv_norm(jax.nn.relu(conv_norm(x, f"{name}.conv1", stride)), f"{name}.conv2", 1)
        x = jax.nn.relu(out + (conv_norm(x, f"{name}.shortcut", stride) if projection else x))
    logits = dense(jnp.mean(x, axis=(2, 3)), params, "head")
    return logits, {**stats, **updated}


def _mlp(spec: MLPSpec, params: Params, stats: Stats, x: jax.Array, train: bool,
         sync_axis: str | None) -> tuple[jax.Array, Stats]:
    x = x.reshape(x.shape[0], -1)  # flattened in NCHW order, as torch's flatten(1)
    for i in range(len(spec.hidden)):
        x = jax.nn.relu(dense(x, params, f"hidden.{i}"))
    return dense(x, params, "head"), stats


def _vit(spec, params: Params, stats: Stats, x: jax.Array, train: bool,
         sync_axis: str | None) -> tuple[jax.Array, Stats]:
    return vit.apply(spec, params, x), stats  # no BatchNorm, dropout 0: train changes nothing


def _gpt(spec, params: Params, stats: Stats, x: jax.Array, train: bool,
         sync_axis: str | None) -> tuple[jax.Array, Stats]:
    return gpt.apply(spec, params, x), stats  # x: token ids; as the ViT, train changes nothing


# One forward per model kind (parbench.spec.KINDS); a kind missing here is an error.
FORWARDS: dict[str, Callable[..., tuple[jax.Array, Stats]]] = {
    "resnet": _resnet, "mlp": _mlp, "vit": _vit, "gpt": _gpt}


def _forward(spec: ModelSpec) -> Callable[..., tuple[jax.Array, Stats]]:
    kind_of(spec)  # an unknown kind: ValueError naming the known ones
    if spec.kind not in FORWARDS:
        raise ValueError(f"JAX has no forward for model kind {spec.kind!r}")
    return FORWARDS[spec.kind]


def apply(spec: ModelSpec, params: Params, stats: Stats, x: jax.Array, train: bool,
          sync_axis: str | None = None) -> tuple[jax.Array, Stats]:
    """Logits of the batch ``x`` (NCHW images -> [rows, classes]; [rows, T] token ids -> [rows,
    T, vocab]) and the running statistics after the pass: updated in training mode, ``stats``
    itself in inference mode. ``sync_axis``: the name of a pmap / shard_map axis over which
    BatchNorm takes its batch statistics (synchronized BatchNorm); None: each caller's rows
    alone."""
    return _forward(spec)(spec, params, stats, x, train, sync_axis)


# --- weights: canonical numpy in, canonical numpy out
def split_weights(spec: ModelSpec, weights: dict[str, np.ndarray]) -> tuple[Params, Stats]:
    """The canonical weights as (trainable float32 arrays, running statistics). A torch state
    dict's ``num_batches_tracked`` counters are accepted and kept in the statistics; any other
    name or shape outside the spec is a ValueError."""
    tracked = {name for name in weights if name.endswith(TRACKED)}
    check_weights(spec, {name: array for name, array in weights.items() if name not in tracked})
    expected = parameters(spec)
    params = {name: jnp.asarray(weights[name], jnp.float32)
              for name, param in expected.items() if param.trainable}
    stats = {name: jnp.asarray(weights[name], jnp.float32)
             for name, param in expected.items() if not param.trainable}
    for name in sorted(tracked):
        if name.removesuffix(TRACKED) + ".running_mean" not in stats:
            raise ValueError(f"{name}: no BatchNorm of the spec has that counter")
        stats[name] = jnp.asarray(weights[name], jnp.int32)
    return params, stats


def export_weights(spec: ModelSpec, params: Params, stats: Stats) -> dict[str, np.ndarray]:
    """Canonical weights (float32, canonical order) from a model's params and statistics; a
    ``num_batches_tracked`` kept by ``split_weights`` comes back as torch's int64."""
    tensors = {**params, **stats}
    weights = {name: np.array(tensors[name], np.float32) for name in parameters(spec)}  # copies
    weights.update({name: np.array(value, TRACKED_DTYPE) for name, value in stats.items()
                    if name.endswith(TRACKED)})
    return weights


# --- loss and evaluation: the forward, then the task's (tasks.py)
def loss_fn(spec: ModelSpec, params: Params, stats: Stats, x: jax.Array, y: jax.Array,
            train: bool = True, sync_axis: str | None = None, *,
            task: TaskLoss) -> tuple[jax.Array, Stats]:
    """(the task's mean loss over the rows given, statistics after the pass): for image
    classification the mean cross-entropy, what torch's ``CrossEntropyLoss`` computes, for
    language modelling its mean over rows and positions; the
    statistics are ``jax.value_and_grad``'s aux; ``task`` is the run's (tasks.loss_for).

    Its gradient inside a data-parallel map (measured, 2 CPU devices, jax 0.10.2): under
    ``pmap`` each device gets its own rows' gradient, which ``lax.pmean`` turns into the global
    batch's; under ``shard_map`` (default ``check_vma``) the gradient of replicated params
    comes back already *summed* over the axis, so the global batch's is that divided by the
    axis size (a pmean on top leaves it summed, a psum doubles it again)."""
    outputs, stats = apply(spec, params, stats, x, train, sync_axis)
    return task.mean_loss(outputs, y), stats


def evaluate(spec: ModelSpec, params: Params, stats: Stats, x: jax.Array, y: jax.Array, *,
             task: TaskLoss) -> tuple[jax.Array, jax.Array]:
    """The task's evaluation outputs in inference mode (image classification: the predicted
    class of each row, the summed cross-entropy; language modelling: the predicted next token
    at every position, the cross-entropy summed over all of them); jit-able, the caller takes
    them to the host."""
    outputs, _ = apply(spec, params, stats, x, train=False)
    return task.evaluation(outputs, y)
