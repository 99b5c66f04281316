"""The data-parallel example across machines with Paddle, started by
``python -m paddle.distributed.launch`` on each: the third step of the porting examples.
dp_paddle.py started its processes with ``spawn``; here the launcher does, one per device of
each machine, and hands each its place through the environment (``PADDLE_TRAINER_ID``,
``PADDLE_TRAINER_ENDPOINTS``...), which ``init_parallel_env`` reads. The training is
dp_paddle.py's, so the losses printed are single_paddle.py's.

On each of 2 machines (node 0's address as --master; ``--host``, this machine's address that
the others reach, defaults to the one its host name resolves to; here both on this one):

    python -m paddle.distributed.launch --nnodes 2 --rank 0 --nproc_per_node 1 \\
        --master 127.0.0.1:29500 --host 127.0.0.1 examples/multinode_paddle.py --steps 20
    python -m paddle.distributed.launch --nnodes 2 --rank 1 --nproc_per_node 1 \\
        --master 127.0.0.1:29500 --host 127.0.0.1 examples/multinode_paddle.py --steps 20
"""

import argparse
import os

from dp_paddle import worker


def main():
    parser = argparse.ArgumentParser(description="data-parallel training across machines, "
                                     "Paddle under paddle.distributed.launch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    if "PADDLE_TRAINER_ID" not in os.environ:
        parser.error("start it with python -m paddle.distributed.launch (see its docstring)")
    worker(steps)


if __name__ == "__main__":
    main()
