"""Dense peak TFLOP/s of common NVIDIA accelerators, as their datasheets state them: the
denominator of model FLOPs utilisation (MFU), chosen by the name the device reports.

* Dense: no structured sparsity. Where a datasheet gives only the with-sparsity figure (marked
  with an asterisk there: Ampere's and Hopper's tensor-core rows, L4's), the dense one is half
  of it, and that half is what is written here, with the datasheet's figure beside it.
* Per dtype: ``fp32`` (the CUDA cores' float32, no tensor cores), ``tf32``, ``bf16`` and
  ``fp16`` (tensor cores, float32 accumulation where the datasheet distinguishes). A dtype the
  device has no tensor-core path for (V100's and T4's bf16 and tf32) is absent, not 0.
* Chosen by explicit patterns on the reported name (torch.cuda.get_device_name, nvidia-smi,
  /proc/driver/nvidia: 'NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB', 'Tesla V100-SXM2-16GB'),
  whole-name matches. A name no pattern matches (another model, a MIG slice, a CPU) gets None:
  never a figure of a similar device.
* The datasheets' figures are at boost clock with the board's default power limit; a capped
  or throttling card does less, which is what the measured peak (``parbench peak``) shows.
"""

from __future__ import annotations

import re

DTYPES = ("fp32", "tf32", "bf16", "fp16")
# the records' dtype names (metrics.compute_dtype) as the datasheets' rows; float32 is the
# datasheet's fp32 row, what the spec's float32 means (TF32 is a different, lossier format)
ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _dense(fp32: float, tf32: float | None, bf16: float | None, fp16: float,
           sparse: bool) -> dict[str, float]:
    """One device's row; ``sparse``: the tensor-core figures given are the datasheet's
    with-sparsity ones, halved here."""
    scale = 0.5 if sparse else 1.0
    row = {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16}
    return {dtype: (value if dtype == "fp32" else value * scale)
            for dtype, value in row.items() if value is not None}


# (pattern on the reported name, case-insensitive, whole name; dense TFLOP/s by dtype)
DEVICES: tuple[tuple[str, dict[str, float]], ...] = (
    # NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5, TF32 156 | 312*, BF16 312 | 624*,
    # FP16 312 | 624* (* sparsity); the same figures for the SXM4 and PCIe boards, 40 and 80 GB
    (r"(NVIDIA )?A100[- ]SXM4?[- ](40|80)GB", _dense(19.5, 156, 312, 312, sparse=False)),
    (r"(NVIDIA )?A100[- ]PCIE[- ](40|80)GB|(NVIDIA )?A100 (40|80)GB PCIE",
     _dense(19.5, 156, 312, 312, sparse=False)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: FP32 67, TF32 989*, BF16 1,979*,
    # FP16 1,979*; reported as 'NVIDIA H100 80GB HBM3'
    (r"(NVIDIA )?H100 80GB HBM3|(NVIDIA )?H100[- ]SXM5?([- ]80GB)?",
     _dense(67, 989, 1979, 1979, sparse=True)),
    # the same datasheet, H100 PCIe: FP32 51, TF32 756*, BF16 1,513*, FP16 1,513*
    (r"(NVIDIA )?H100 PCIE", _dense(51, 756, 1513, 1513, sparse=True)),
    # the same datasheet, H100 NVL: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*
    (r"(NVIDIA )?H100 NVL", _dense(60, 835, 1671, 1671, sparse=True)),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: FP32 67, TF32 989*, BF16 1,979*,
    # FP16 1,979*; reported as 'NVIDIA H200'
    (r"(NVIDIA )?H200", _dense(67, 989, 1979, 1979, sparse=True)),
    # the same datasheet, H200 NVL: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*
    (r"(NVIDIA )?H200 NVL", _dense(60, 835, 1671, 1671, sparse=True)),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 120*, BF16 242*, FP16 242*
    (r"(NVIDIA )?L4", _dense(30.3, 120, 242, 242, sparse=True)),
    # NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2, TF32 62.5 | 125*, BF16 125 | 250*,
    # FP16 125 | 250*
    (r"(NVIDIA )?A10", _dense(31.2, 62.5, 125, 125, sparse=False)),
    # NVIDIA A30 Tensor Core GPU datasheet: FP32 10.3, TF32 82 | 165*, BF16 165 | 330*,
    # FP16 165 | 330*
    (r"(NVIDIA )?A30", _dense(10.3, 82, 165, 165, sparse=False)),
    # NVIDIA Tesla V100 datasheet: V100 for NVLink (SXM2) single precision 15.7, tensor 125
    # (FP16 with FP32 accumulate); no bf16, no tf32
    (r"(Tesla |NVIDIA )?V100-SXM2-(16|32)GB", _dense(15.7, None, None, 125, sparse=False)),
    # the same datasheet: V100 for PCIe, single 14, tensor 112; V100S PCIe, single 16.4,
    # tensor 130
    (r"(Tesla |NVIDIA )?V100-PCIE-(16|32)GB", _dense(14, None, None, 112, sparse=False)),
    (r"(Tesla |NVIDIA )?V100S-PCIE-32GB", _dense(16.4, None, None, 130, sparse=False)),
    # NVIDIA T4 Tensor Core GPU datasheet: single precision 8.1, mixed precision (FP16/FP32)
    # 65; no bf16, no tf32
    (r"(Tesla |NVIDIA )?T4", _dense(8.1, None, None, 65, sparse=False)),
)


def _row(device_name: str) -> dict[str, float] | None:
    """The datasheet row whose pattern matches the whole name (blanks collapsed)."""
    name = " ".join(device_name.split())
    matches = [row for pattern, row in DEVICES if re.fullmatch(pattern, name, re.IGNORECASE)]
    if len(matches) > 1:  # the patterns are meant to be disjoint: a clash is a bug here
        raise AssertionError(f"{name!r} matches {len(matches)} datasheet rows")
    return matches[0] if matches else None


def datasheet_peak(device_name: str, dtype: str) -> float | None:
    """Dense peak TFLOP/s of the device called ``device_name`` in ``dtype`` (fp32, tf32, bf16,
    fp16, or the records' float32, bfloat16, float16); None for a device not in the table (a
    CPU among them) or a dtype the device has no figure for. An unknown dtype name is a
    ValueError: a misspelling would otherwise read as 'no peak'."""
    dtype = ALIASES.get(dtype, dtype)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: one of {', '.join([*DTYPES, *ALIASES])}")
    row = _row(device_name)
    return None if row is None else row.get(dtype)
