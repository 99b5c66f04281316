"""Evaluation across DEVICES devices with JAX: the evaluation step of the porting examples. A
sharded array splits evenly or not at all, so the test set of 101 rows is padded to 102 with a
row of weight 0, split over the mesh, and one compiled program sums the weighted counts (right
answers, loss, rows); XLA reduces them across the devices. The scores, computed from the sums,
are one device's. Each version prints the same scores; here of the initial weights, as the
data-parallel scripts start.

    python examples/eval_jax.py
"""

import os

from data import DEVICES, TEST_ROWS, initial_weights, test_data

os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                           f"--xla_force_host_platform_device_count={DEVICES}")

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from single_jax import forward  # noqa: E402


# --- eval: sums weighted by each row's weight (0 for the padding), over the whole sharded set
@jax.jit
def evaluate(params, x, y, weight):
    logits = forward(params, x)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    right = (jnp.argmax(logits, 1) == y).astype(jnp.float32)
    return jnp.stack([(right * weight).sum(), (losses * weight).sum(), weight.sum()])


def main():
    features, labels = test_data()
    padded = -(-TEST_ROWS // DEVICES) * DEVICES
    extra = padded - TEST_ROWS
    x = np.concatenate([features, np.zeros((extra, features.shape[1]), np.float32)])
    y = np.concatenate([labels, np.zeros(extra, np.int64)])
    weight = np.concatenate([np.ones(TEST_ROWS, np.float32), np.zeros(extra, np.float32)])
    split = NamedSharding(Mesh(jax.devices()[:DEVICES], ("data",)), P("data"))
    params = {name: jnp.asarray(value) for name, value in initial_weights().items()}
    right, loss, rows = np.asarray(evaluate(params, *jax.device_put((x, y, weight), split)))
    print(f"accuracy {right / rows:.7f} loss {loss / rows:.7f} rows {rows:.0f}")


if __name__ == "__main__":
    main()
