"""The data-parallel example across machines with TensorFlow's MultiWorkerMirroredStrategy: the
third step of the porting examples. One process per machine (one CPU each), each started with
``TF_CONFIG`` naming every worker and its own index; the strategy reads it. The training is
dp_tf.py's, replica for worker, so the losses printed are single_tf.py's (every worker prints
them: the strategy's reduce gives each the global batch's loss).

On each of 2 machines (every worker's address in the list; here both on this one):

    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:29500", "127.0.0.1:29501"]},
                "task": {"type": "worker", "index": 0}}' python examples/multinode_tf.py
    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:29500", "127.0.0.1:29501"]},
                "task": {"type": "worker", "index": 1}}' python examples/multinode_tf.py
"""

import argparse
import json
import os

import tensorflow as tf
from dp_tf import train


def main():
    parser = argparse.ArgumentParser(description="data-parallel training across machines, "
                                     "TF MultiWorkerMirroredStrategy")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    try:
        json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
    except (KeyError, ValueError, TypeError):
        parser.error("TF_CONFIG must name the workers and this one's index (see the docstring)")
    train(tf.distribute.MultiWorkerMirroredStrategy(), steps)  # reads TF_CONFIG


if __name__ == "__main__":
    main()
