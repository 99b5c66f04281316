"""What every porting example trains on, from numpy alone, so that the four frameworks' scripts
start from the same data, the same initial weights and the same batch order, and print the
same losses. Nothing here imports a framework."""

import numpy as np

FEATURES, HIDDEN, CLASSES, ROWS, BATCH, LR = 16, 32, 4, 512, 32, 0.1


def make_data(seed=0, rows=ROWS):
    """Gaussian blobs, one per class: float32 features, int64 labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, (CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, rows)
    features = centres[labels] + rng.normal(0, 1.5, (rows, FEATURES))
    return features.astype(np.float32), labels.astype(np.int64)


def initial_weights(seed=1):
    """Dense layers as [out, in] (torch's layout), drawn uniform in +-1/sqrt(fan_in)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, n_in, n_out in (("hidden", FEATURES, HIDDEN), ("head", HIDDEN, CLASSES)):
        bound = 1 / np.sqrt(n_in)
        weights[f"{name}.weight"] = rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32)
        weights[f"{name}.bias"] = rng.uniform(-bound, bound, n_out).astype(np.float32)
    return weights


def batches(steps, seed=2):
    """The rows of each step: a fresh permutation every epoch, the tail left out."""
    per_epoch = ROWS // BATCH
    for step in range(steps):
        epoch, t = divmod(step, per_epoch)
        yield np.random.default_rng([seed, epoch]).permutation(ROWS)[t * BATCH:(t + 1) * BATCH]

# --- data parallel: each of DEVICES devices trains on its contiguous part of every global batch
DEVICES = 2


def shard(rows, rank, devices=DEVICES):
    """Device ``rank``'s rows of a global batch: BATCH / devices of them, in order."""
    per_device = len(rows) // devices
    return rows[rank * per_device:(rank + 1) * per_device]

# --- checkpoints: SGD with momentum, so that the optimizer has state a resume must keep
MOMENTUM = 0.9

# --- gradient accumulation: each global batch in MICRO_BATCHES consecutive parts
MICRO_BATCHES = 2


def micro_batches(rows, count=MICRO_BATCHES):
    """The global batch's rows in ``count`` consecutive parts of equal size."""
    size = len(rows) // count
    return [rows[i * size:(i + 1) * size] for i in range(count)]

# --- evaluation: a test set whose row count no device count divides, drawn as the training set
TEST_ROWS = 101


def test_data():
    """TEST_ROWS more rows of the training set's blobs (same centres: same first draws)."""
    features, labels = make_data(rows=ROWS + TEST_ROWS)
    return features[ROWS:], labels[ROWS:]


def test_part(rank, devices=DEVICES):
    """Device ``rank``'s contiguous part of the test set; the parts differ by at most one row."""
    bounds = np.linspace(0, TEST_ROWS, devices + 1).round().astype(int)
    return slice(int(bounds[rank]), int(bounds[rank + 1]))

# --- optimizers and schedules: AdamW, a linear warm-up from 0 over WARMUP steps, then a cosine
# decay to 0 at SCHEDULE_STEPS (Keras', Optax's and Paddle's warm-up start at 0 on step 0)
PEAK_LR, WARMUP, SCHEDULE_STEPS, WEIGHT_DECAY = 0.01, 3, 20, 0.01


def learning_rate(step):
    """The rate step ``step`` (from 0) trains at: what every framework's scheduler must give."""
    if step < WARMUP:
        return PEAK_LR * step / WARMUP
    progress = (step - WARMUP) / (SCHEDULE_STEPS - WARMUP)
    return PEAK_LR * 0.5 * (1 + np.cos(np.pi * progress))

# --- random numbers: dropout masks drawn on the host, per row of each global batch, so every
# framework (and every device, taking its rows' masks) drops the same units
DROPOUT = 0.5


def dropout_masks(step, seed=3):
    """[BATCH, HIDDEN] float32: 0 for a dropped unit, 1 / (1 - DROPOUT) for a kept one."""
    keep = np.random.default_rng([seed, step]).random((BATCH, HIDDEN)) >= DROPOUT
    return (keep / (1 - DROPOUT)).astype(np.float32)

# --- synchronized BatchNorm: a BatchNorm between the hidden layer and its ReLU, in training
# mode (batch statistics); epsilon is torch's, Paddle's and Flax's default (Keras' is 1e-3)
BN_EPSILON = 1e-5
