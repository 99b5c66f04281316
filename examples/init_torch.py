"""What a freshly built dense layer holds in PyTorch: the initial-weights step of the porting
examples. Each framework draws a new layer's weights from its own distribution, so a model built
in two frameworks starts from different weights even with every seed fixed; the examples load
data.initial_weights() instead. The script prints the spread of a 256 -> 512 layer's weight
and bias, and the distribution's bound, to compare with init_tf.py, init_paddle.py and
init_jax.py.

    python examples/init_torch.py
"""

import argparse

import torch

IN, OUT = 256, 512


# --- model: Linear draws weight and bias uniform in +-1/sqrt(in) (kaiming_uniform_ with
# a=sqrt(5), and the bias's own bound), in [out, in]
def default_layer():
    torch.manual_seed(0)
    layer = torch.nn.Linear(IN, OUT)
    return layer.weight.detach().numpy(), layer.bias.detach().numpy()


def main():
    argparse.ArgumentParser(description="a fresh dense layer's weights, PyTorch").parse_args()
    weight, bias = default_layer()
    print(f"weight {list(weight.shape)} std {weight.std():.4f} max {abs(weight).max():.4f}")
    print(f"bias std {bias.std():.4f} max {abs(bias).max():.4f}")


if __name__ == "__main__":
    main()
