"""What a freshly built dense layer holds in JAX (Flax's Dense, the layer most JAX code uses):
the initial-weights step of the porting examples. Each framework draws a new layer's weights
from its own distribution, so a model built in two frameworks starts from different weights even
with every seed fixed; the examples load data.initial_weights() instead. The script prints the
spread of a 256 -> 512 layer's kernel and bias, to compare with init_torch.py, init_tf.py and
init_paddle.py.

    python examples/init_jax.py
"""

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp

IN, OUT = 256, 512


# --- model: Dense draws its kernel LeCun-normal, in [in, out]: a normal cut at two standard
# deviations, rescaled so its std is 1/sqrt(in) (values up to 2.27/sqrt(in)); the bias
# starts at zero
def default_layer():
    params = nn.Dense(OUT).init(jax.random.key(0), jnp.ones((1, IN)))["params"]
    return jax.device_get(params["kernel"]), jax.device_get(params["bias"])


def main():
    argparse.ArgumentParser(description="a fresh dense layer's weights, Flax").parse_args()
    weight, bias = default_layer()
    print(f"weight {list(weight.shape)} std {weight.std():.4f} max {abs(weight).max():.4f}")
    print(f"bias std {bias.std():.4f} max {abs(bias).max():.4f}")


if __name__ == "__main__":
    main()
