"""The spec's models as Flax NNX modules, and the functional interface the strategies train
them through.

The ResNet and the MLP are here, the vision transformer in vit.py, the causal language model
in gpt.py (on the ViT's blocks) and the detector in centernet.py (on the ResNet's backbone),
all built from the shared layers of layers.py; ``MODELS`` picks one by ``spec.kind``. Module
attributes are named as the canonical weights are, so a variable's path is its canonical name
(layers.canonical_name), and loading or exporting the canonical weights is a transpose of the
kernels.

The strategies use NNX's functional API, as JAX users do under ``pmap``, ``shard_map`` or a
``jit`` with shardings: a model is split once into its graph (``nnx.GraphDef``, static) and two
states, the parameters (``nnx.Param``) and the BatchNorm running statistics (``nnx.BatchStat``),
both pytrees of arrays; ``apply`` merges them into a module inside the traced function, calls
it, and returns the statistics it updated. Training or inference (``Module.train()`` /
``eval()``) and the synchronized-BatchNorm axis are attributes of the graph, so each
combination has a graph of its own (``graph``, cached). ``loss_fn`` and ``evaluate`` put the
run's task (tasks.py) after the forward.
"""

from __future__ import annotations

import math
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from parbench.contract.spec import (
    MLPSpec,
    ModelSpec,
    ResNetSpec,
    kind_of,
    parameters,
)
from parbench.contract.weights import check_weights

from .centernet import CenterNet
from .gpt import GPT
from .layers import (
    Params,
    Stats,
    canonical_name,
    dense,
    stem_and_blocks,
    to_canonical,
    to_flax,
)
from .tasks import TaskLoss
from .vit import ViT

TRACKED = ".num_batches_tracked"  # torch's BatchNorm counter: bookkeeping, not the spec's
FLOAT32 = "float32"


class ResNet(nnx.Module):
    def __init__(self, spec: ResNetSpec, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.stem, self.blocks = stem_and_blocks(spec, dtype, rngs)
        self.head = dense(spec.stage_channels[-1], spec.num_classes, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Logits of the NCHW batch ``x`` (NHWC from here on, Flax's layout)."""
        x = self.stem(x.transpose(0, 2, 3, 1))
        for block in self.blocks:
            x = block(x)
        return self.head(jnp.mean(x, axis=(1, 2)))  # global average pooling


class MLP(nnx.Module):
    def __init__(self, spec: MLPSpec, dtype: jnp.dtype, rngs: nnx.Rngs):
        sizes = [math.prod(spec.input_shape), *spec.hidden]
        self.hidden = nnx.List([dense(n_in, n_out, dtype, rngs)
                                for n_in, n_out in zip(sizes, sizes[1:])])
        self.head = dense(sizes[-1], spec.num_classes, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)  # flattened in NCHW order, as torch's flatten(1)
        for layer in self.hidden:
            x = nnx.relu(layer(x))
        return self.head(x)


# One module per model kind (parbench.spec.KINDS); a kind missing here is an error.
MODELS: dict[str, type[nnx.Module]] = {"resnet": ResNet, "mlp": MLP, "vit": ViT, "gpt": GPT,
                                       "centernet": CenterNet}


def build(spec: ModelSpec, dtype: str = FLOAT32) -> nnx.Module:
    """``spec``'s module with abstract variables (shapes, no values: the weights come from the
    canonical file, so nothing is initialised at random). ``dtype``: what its layers compute
    in (Flax's ``dtype``; the parameters stay float32, Flax's ``param_dtype``)."""
    kind_of(spec)  # an unknown kind: ValueError naming the known ones
    if spec.kind not in MODELS:
        raise ValueError(f"JAX has no model for model kind {spec.kind!r}")
    return nnx.eval_shape(lambda: MODELS[spec.kind](spec, jnp.dtype(dtype), nnx.Rngs(0)))


@lru_cache
def graph(spec: ModelSpec, train: bool, sync_axis: str | None = None,
          dtype: str = FLOAT32) -> nnx.GraphDef:
    """The module's graph in training or inference mode; ``sync_axis``: the pmap / shard_map
    axis over which BatchNorm takes its batch statistics (synchronized BatchNorm)."""
    module = build(spec, dtype)
    module.train() if train else module.eval()
    if sync_axis is not None:
        module.set_attributes(axis_name=sync_axis, raise_if_not_found=False)
    return nnx.graphdef(module)


def apply(spec: ModelSpec, params: Params, stats: Stats, x: jax.Array, train: bool,
          sync_axis: str | None = None, dtype: str = FLOAT32) -> tuple[jax.Array, Stats]:
    """Logits of the batch ``x`` (NCHW images -> [rows, classes]; [rows, T] token ids -> [rows,
    T, vocab]; the detector's NCHW images -> its NCHW maps [rows, classes + 4, H/4, W/4]), in
    ``dtype``, and the running statistics after the pass: updated in training
    mode, as they were in inference mode."""
    # copy=True: variables made here, in this trace. Without it the module would hold the
    # states' own, made where the arrays entered a jit; BatchNorm writing into one of those
    # from inside jax.grad is a TraceContextError (flax 0.12.8)
    module = nnx.merge(graph(spec, train, sync_axis, dtype), params, stats, copy=True)
    return module(x), nnx.state(module, nnx.BatchStat)


# --- weights: canonical numpy in, canonical numpy out
def split_weights(spec: ModelSpec, weights: dict[str, np.ndarray]) -> tuple[Params, Stats]:
    """The canonical weights as the module's (parameters, running statistics). A torch state
    dict's ``num_batches_tracked`` counters are accepted and left out, as torch's own loader
    treats them (frameworks/torch/model.py); any other name or shape outside the spec is a
    ValueError."""
    counters = {name for name in weights if name.endswith(TRACKED)}
    norms = {name.removesuffix(".running_mean") for name in parameters(spec)
             if name.endswith(".running_mean")}
    for name in sorted(counters):
        if name.removesuffix(TRACKED) not in norms:
            raise ValueError(f"{name}: no BatchNorm of the spec has that counter")
    weights = {name: array for name, array in weights.items() if name not in counters}
    check_weights(spec, weights)
    graphdef, abstract = nnx.split(build(spec))

    def loaded(path: tuple, variable: nnx.Variable) -> tuple[tuple, nnx.Variable]:
        array = to_flax(path, weights[canonical_name(path)])
        return path, variable.replace(value=jnp.asarray(array, jnp.float32))

    state = nnx.from_flat_state([loaded(*item) for item in nnx.to_flat_state(abstract)])
    _, params, stats = nnx.split(nnx.merge(graphdef, state), nnx.Param, nnx.BatchStat)
    return params, stats


def export_weights(spec: ModelSpec, params: Params, stats: Stats) -> dict[str, np.ndarray]:
    """Canonical weights (float32, canonical order) from a module's parameters and statistics
    (device or host arrays)."""
    tensors = {canonical_name(path): to_canonical(path, np.asarray(variable.get_value()))
               for state in (params, stats) for path, variable in nnx.to_flat_state(state)}
    return {name: np.array(tensors[name], np.float32) for name in parameters(spec)}  # copies


def names(tree) -> list[str]:
    """The canonical name of each array of ``tree`` (a state, or a pytree of its structure,
    as an optimizer's moments), in ``jax.tree.leaves`` order."""
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [canonical_name(tuple(key.key for key in path if isinstance(key, jax.tree_util.DictKey)))
            for path, _ in paths]


# --- loss and evaluation: the forward, then the task's (tasks.py)
def loss_fn(spec: ModelSpec, params: Params, stats: Stats, x: jax.Array, y: jax.Array,
            train: bool = True, sync_axis: str | None = None, *, task: TaskLoss,
            dtype: str = FLOAT32, seen: dict | None = None) -> tuple[jax.Array, Stats]:
    """(the task's mean loss over the rows given, statistics after the pass): for image
    classification the mean cross-entropy, what torch's ``CrossEntropyLoss`` computes, for
    language modelling its mean over rows and positions, for object detection the mean over
    images of each one's focal and regression loss; the statistics are
    ``jax.value_and_grad``'s aux; ``task`` is the run's (tasks.loss_for).

    Its gradient inside a data-parallel map (measured, 2 CPU devices, jax 0.10.2): under
    ``pmap`` each device gets its own rows' gradient, which ``lax.pmean`` turns into the global
    batch's; under ``shard_map`` (default ``check_vma``) the gradient of replicated params
    comes back already *summed* over the axis, so the global batch's is that divided by the
    axis size (a pmean on top leaves it summed, a psum doubles it again).

    ``dtype``: what the layers compute in (--precision); the task takes the loss in float32.
    ``seen``: receives, while tracing, the dtype the layers computed the outputs in (the
    record's compute_dtype: what ran, not what was asked)."""
    outputs, stats = apply(spec, params, stats, x, train, sync_axis, dtype)
    if seen is not None:
        seen["compute_dtype"] = str(outputs.dtype)
    return task.mean_loss(outputs, y), stats


def evaluate(spec: ModelSpec, params: Params, stats: Stats, x: jax.Array, y: jax.Array, *,
             task: TaskLoss, dtype: str = FLOAT32) -> tuple[jax.Array, jax.Array]:
    """The task's evaluation outputs in inference mode (image classification: the predicted
    class of each row, the summed cross-entropy; language modelling: the predicted next token
    at every position, the cross-entropy summed over all of them; object detection: the raw
    maps of each row, the per-image loss summed); jit-able, the caller takes them to the
    host."""
    outputs, _ = apply(spec, params, stats, x, train=False, dtype=dtype)
    return task.evaluation(outputs, y)
