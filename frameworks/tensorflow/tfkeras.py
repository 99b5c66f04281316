"""TensorFlow and Keras, imported once the environment they read at import is set. Every module
of this package takes ``tf`` and ``keras`` from here, so whichever of them a process imports
first, TensorFlow starts with that environment. runtime.py re-exports both: the tests and
benchmarks take them from there.
"""

from __future__ import annotations

import os

# TensorFlow's C++ logging reads its level once, at import: set it before. A user who wants
# the logs sets TF_CPP_MIN_LOG_LEVEL=0 themselves (see runtime.setup_threads for job.verbose).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"  # the models are written with TF ops

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

__all__ = ["keras", "tf"]
