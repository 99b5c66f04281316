"""What a freshly built dense layer holds in Paddle: the initial-weights step of the porting
examples. Each framework draws a new layer's weights from its own distribution, so a model built
in two frameworks starts from different weights even with every seed fixed; the examples load
data.initial_weights() instead. The script prints the spread of a 256 -> 512 layer's weight and
bias, to compare with init_torch.py, init_tf.py and init_jax.py.

    python examples/init_paddle.py
"""

import argparse

import paddle

IN, OUT = 256, 512


# --- model: Linear draws its weight Xavier-uniform, in +-sqrt(6 / (in + out)), in [in, out]
# (Keras' layout and distribution); the bias starts at zero
def default_layer():
    paddle.seed(0)
    layer = paddle.nn.Linear(IN, OUT)
    return layer.weight.numpy(), layer.bias.numpy()


def main():
    argparse.ArgumentParser(description="a fresh dense layer's weights, Paddle").parse_args()
    weight, bias = default_layer()
    print(f"weight {list(weight.shape)} std {weight.std():.4f} max {abs(weight).max():.4f}")
    print(f"bias std {bias.std():.4f} max {abs(bias).max():.4f}")


if __name__ == "__main__":
    main()
