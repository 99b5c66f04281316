"""``parbench peak`` and what runs read of it: the datasheet table chosen by device name, the
GPU models the driver shows, the timing loop (on a numpy stand-in, in-process), the cache
(round trip, keys, corrupt files), bad input through the CLI, and real measurements of every
framework, each in its own process as the command runs them (conftest: never in this one),
keyed by the threads they ran with."""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest

from conftest import needs, parbench
from parbench.base.devices import gpu_count, gpu_models
from parbench.cli.main import build_parser
from parbench.cli.peak import peak_plan
from parbench.run.datasheet import DEVICES, datasheet_peak
from parbench.run.matmul import CPU_SIZES, Matmul, time_sizes
from parbench.run.peak import (
    CACHE_ENV,
    PeakCacheError,
    cache_key,
    installed_version,
    measured_peak,
    read_cache,
    store,
)
from parbench.run.registry import FRAMEWORKS

# A generous ceiling on one core's float32 products: 2 FMA pipes x 16 float32 lanes (AVX-512)
# x 2 FLOPs x 5 GHz = 320 GFLOP/s; no CPU core does more in float32.
CORE_FP32_CEILING_TFLOPS = 0.32
GIGAFLOP_IN_TERA = 1e-3


# --- the datasheet table
@pytest.mark.parametrize("name,dtype,tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5),  # 1,979 with sparsity, halved
    ("NVIDIA H100 80GB HBM3", "float32", 67),
    ("NVIDIA H100 PCIe", "tf32", 378),
    ("NVIDIA H100 NVL", "fp16", 835.5),
    ("NVIDIA H200", "bfloat16", 989.5),
    ("NVIDIA H200 NVL", "bf16", 835.5),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312),
    ("NVIDIA A100-SXM4-40GB", "tf32", 156),
    ("NVIDIA A100-PCIE-40GB", "fp32", 19.5),
    ("NVIDIA A100 80GB PCIe", "float16", 312),
    ("NVIDIA L4", "bf16", 121),
    ("NVIDIA A10", "tf32", 62.5),
    ("Tesla V100-SXM2-16GB", "fp16", 125),
    ("Tesla V100-PCIE-32GB", "fp32", 14),
    ("Tesla T4", "fp16", 65),
    ("  nvidia   h200 ", "bf16", 989.5),  # blanks and case as a tool may print them
])
def test_datasheet_knows_the_common_accelerators(name, dtype, tflops):
    assert datasheet_peak(name, dtype) == pytest.approx(tflops)


@pytest.mark.parametrize("name", [
    "NVIDIA A800-SXM4-80GB", "NVIDIA A10G", "NVIDIA L40S", "NVIDIA H100", "NVIDIA GH200 480GB",
    "Tesla V100-SXM3-32GB", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "AMD EPYC", "cpu", ""])
def test_an_unknown_device_gets_no_figure(name):
    """A similar device, a MIG slice, a CPU: None in every dtype, never a neighbour's figure."""
    assert all(datasheet_peak(name, dtype) is None for dtype in ("fp32", "tf32", "bf16", "fp16"))


@pytest.mark.parametrize("name", ["Tesla V100-SXM2-32GB", "Tesla T4"])
def test_a_dtype_the_device_lacks_is_absent_not_zero(name):
    assert datasheet_peak(name, "bf16") is None and datasheet_peak(name, "tf32") is None
    assert datasheet_peak(name, "fp16") > 0


def test_an_unknown_dtype_is_an_error_not_a_missing_peak():
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        datasheet_peak("NVIDIA H200", "int8")


def test_datasheet_rows_are_ordered_like_the_hardware():
    """A typo check: per device fp32 < tf32 < bf16 = fp16 wherever the dtype is present."""
    for _pattern, row in DEVICES:
        assert row["fp32"] < row["fp16"]
        if "tf32" in row:
            assert row["fp32"] < row["tf32"] < row["bf16"] == row["fp16"]


# --- the GPUs the driver shows
def _driver(tmp_path, gpus):
    """A stand-in for /proc/driver/nvidia/gpus: one folder per (bus id, model, uuid)."""
    for bus, model, uuid in gpus:
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 42\nGPU UUID: \t {uuid}\nBus Type: \t PCIe\n")
    return tmp_path


GPUS = [("0000:3b:00.0", "NVIDIA L4", "GPU-bbbb-1"), ("0000:18:00.0", "NVIDIA H200", "GPU-aaaa-0")]


@pytest.mark.parametrize("visible,models", [
    (None, ["NVIDIA H200", "NVIDIA L4"]),  # bus order
    ("1", ["NVIDIA L4"]),
    ("1,0", ["NVIDIA L4", "NVIDIA H200"]),
    ("GPU-bbbb", ["NVIDIA L4"]),  # a UUID prefix
    ("", []),
    ("-1", []),
    ("0,-1,1", ["NVIDIA H200"]),  # CUDA stops at the first invalid entry
    ("MIG-0c1d", []),
])
def test_gpu_models_follow_cuda_visible_devices(tmp_path, monkeypatch, visible, models):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_models(_driver(tmp_path, GPUS)) == models


def test_gpu_models_without_a_driver(tmp_path):
    assert gpu_models(tmp_path / "absent") == []


# --- the timing loop, on numpy
class NumpyMatmul(Matmul):
    framework, version = "numpy", np.__version__
    delay_per_flop = 0.0  # seconds slept per FLOP: a slow (emulated) product
    result_dtype = "float32"

    def operands(self, a, b):
        return a, b

    def multiply(self, a, b):
        time.sleep(self.delay_per_flop * 2 * a.shape[0] ** 3)
        return a @ b

    def synchronize(self, outputs):
        pass

    def dtype_of(self, output):
        return self.result_dtype


def test_the_peak_is_the_best_size_with_every_size_reported():
    result = time_sizes(NumpyMatmul("float32", 1, "cpu"), [64, 16, 32], budget=0.02)
    assert [figure["size"] for figure in result["sizes"]] == [16, 32, 64]
    assert result["tflops"] == max(figure["tflops"] for figure in result["sizes"])
    assert result["best_size"] in (16, 32, 64) and result["unsupported"] is None
    for figure in result["sizes"]:
        assert figure["samples"] >= 5 and figure["tflops"] == pytest.approx(
            2 * figure["size"] ** 3 / figure["median_s"] / 1e12)


def test_sizes_too_slow_to_sample_are_skipped():
    """0.1 us per FLOP: a product of n=32 takes 6.5 ms, of 64 52 ms, of 128 0.42 s. Sampling
    (2 warm-ups, 5 samples at least) 64 takes 0.37 s, within 4 budgets of 0.2 s; 128 would
    take 2.9 s."""
    slow = NumpyMatmul("float32", 1, "cpu")
    slow.delay_per_flop = 1e-7
    result = time_sizes(slow, [32, 64, 128, 256], budget=0.2)
    assert [figure["size"] for figure in result["sizes"]] == [32, 64]
    assert result["skipped_sizes"] == [128, 256]


def test_a_product_in_another_dtype_is_unsupported_not_a_figure():
    widened = NumpyMatmul("bfloat16", 1, "cpu")
    result = time_sizes(widened, [32], budget=0.01)
    assert result["tflops"] is None and result["sizes"] == []
    assert result["unsupported"] == "a bfloat16 matmul on cpu returns float32"


def test_a_refused_product_is_unsupported_in_one_line():
    class Refusing(NumpyMatmul):
        def multiply(self, a, b):
            raise RuntimeError("(NotFound) The kernel `matmul` is not registered. Hint: use "
                               "another dtype\n  at kernel_factory.cc:317")

    result = time_sizes(Refusing("bfloat16", 1, "cpu"), [32], budget=0.01)
    assert result["tflops"] is None
    assert result["unsupported"] == ("no bfloat16 matmul on cpu: RuntimeError: (NotFound) The "
                                     "kernel `matmul` is not registered")


# --- the cache
RESULT = {"framework": "torch", "framework_version": "9.9.9", "dtype": "float32", "threads": 2,
          "device": "cpu", "tflops": 0.15, "best_size": 1024, "unsupported": None,
          "sizes": [{"size": 1024, "tflops": 0.15}], "skipped_sizes": []}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "peak.json"
    monkeypatch.setenv(CACHE_ENV, str(path))
    return path


def test_the_cache_round_trips_and_replaces_an_entry(cache):
    assert measured_peak("torch", "9.9.9", "float32", 2) is None  # no file yet
    store(RESULT)
    store({**RESULT, "tflops": 0.25})  # the same key: replaced, not added
    found = measured_peak("torch", "9.9.9", "float32", 2)
    assert found["tflops"] == 0.25 and found["best_size"] == 1024 and found["measured_at"]
    (entry,) = json.loads(cache.read_text())["entries"]
    assert entry["key"] == cache_key("torch", "9.9.9", "float32", 2)
    assert set(entry["key"]) == {"cpu_model", "cores", "device", "framework",
                                 "framework_version", "dtype", "threads"}
    assert sorted(os.listdir(cache.parent)) == ["peak.json", "peak.json.lock"]  # no temp left


@pytest.mark.parametrize("lookup", [
    ("paddle", "9.9.9", "float32", 2, "cpu"),
    ("torch", "9.9.8", "float32", 2, "cpu"),
    ("torch", "9.9.9", "bfloat16", 2, "cpu"),
    ("torch", "9.9.9", "float32", 1, "cpu"),
    ("torch", "9.9.9", "float32", 2, "NVIDIA H200"),
])
def test_an_entry_of_another_key_is_not_found(cache, lookup):
    store(RESULT)
    assert measured_peak(*lookup) is None


def test_an_entry_of_another_machine_is_not_found(cache):
    store(RESULT)
    data = json.loads(cache.read_text())
    data["entries"][0]["key"]["cpu_model"] = "another CPU"
    cache.write_text(json.dumps(data))
    assert measured_peak("torch", "9.9.9", "float32", 2) is None


def test_a_gpu_entry_answers_any_thread_count():
    assert cache_key("torch", "9.9.9", "bfloat16", 2, "NVIDIA H200")["threads"] is None
    assert cache_key("torch", "9.9.9", "bfloat16", 2)["threads"] == 2


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_a_gpu_lookup_without_a_gpu_finds_nothing(cache):
    store(RESULT)
    assert measured_peak("torch", "9.9.9", "float32", 2, "cuda") is None


@pytest.mark.parametrize("text,fragment", [
    ("{not json", "is not JSON"),
    ('{"entries": []}', 'no "format": 1'),
    ('{"format": 1, "entries": [{"key": {}}]}', "entry 0 has no key"),
    ("[1, 2]", 'no "format": 1'),
])
def test_a_corrupt_cache_is_one_clear_error(cache, text, fragment):
    cache.parent.mkdir()
    cache.write_text(text)
    with pytest.raises(PeakCacheError) as error:
        measured_peak("torch", "9.9.9", "float32", 2)
    assert fragment in str(error.value) and str(cache) in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("tflops", [-1.0, 0, float("nan"), float("inf"), "fast", True])
def test_a_cached_figure_must_be_finite_and_positive(cache, tflops):
    store(RESULT)
    data = json.loads(cache.read_text())
    data["entries"][0]["result"]["tflops"] = tflops
    cache.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    with pytest.raises(PeakCacheError, match="tflops"):
        read_cache()


# --- the command: bad input
@pytest.mark.parametrize("args,fragment", [
    (["--threads", "0"], "--threads 0: must be from 1"),
    (["--threads", "two"], "--threads 'two': not a whole number"),
    (["--threads", "nan"], "not a whole number"),
    (["--threads", "1.5"], "not a whole number"),
    (["--sizes", "512,x"], "--sizes 'x': not a whole number"),
    (["--sizes", "8"], "--sizes 8: must be from 16"),
    (["--sizes", "100000"], "must be from 16 to 32768"),
    (["--dtype", "float32,int8"], "--dtype float32,int8: each one of"),
    (["--framework", "caffe"], "--framework caffe: not one of"),
    (["--device", "tpu"], "--device tpu: cpu or cuda"),
    pytest.param(["--device", "cuda"], "shows no GPU",
                 marks=pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    cache = tmp_path / "peak.json"
    done = parbench("peak", *args, env={CACHE_ENV: str(cache)})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parbench: error:"), done.stderr
    assert fragment in lines[0]
    assert not cache.exists() and done.stdout == ""


def test_a_corrupt_cache_stops_the_command_before_it_measures(tmp_path):
    cache = tmp_path / "peak.json"
    cache.write_text("{half a file")
    done = parbench("peak", env={CACHE_ENV: str(cache)})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("parbench: error: the peak cache") and "is not JSON" in line
    assert cache.read_text() == "{half a file"


# --- real measurements
def plausible(tflops: float) -> bool:
    """Above 1 GFLOP/s, below what this process's cores could do at most."""
    return math.isfinite(tflops) and GIGAFLOP_IN_TERA < tflops < ceiling()


def ceiling() -> float:
    """What this process's cores could do at most."""
    return len(os.sched_getaffinity(0)) * CORE_FP32_CEILING_TFLOPS


@pytest.mark.slow
@pytest.mark.parametrize("framework", [
    pytest.param("torch", marks=needs("torch")), pytest.param("jax", marks=needs("jax"))])
def test_a_real_measurement_is_plausible_and_cached(tmp_path, framework):
    """Small sizes (the command's --sizes), then the same command again: read from the cache,
    no framework process started (its entry untouched)."""
    cache = tmp_path / "peak.json"
    cores = len(os.sched_getaffinity(0))
    args = ("peak", "--framework", framework, "--dtype", "float32", "--threads", str(cores),
            "--sizes", "128,256")
    first = parbench(*args, env={CACHE_ENV: str(cache)})
    assert first.returncode == 0, first.stderr
    (entry,) = json.loads(cache.read_text())["entries"]
    result = entry["result"]
    assert plausible(result["tflops"]), result
    assert [figure["size"] for figure in result["sizes"]] == [128, 256]
    assert result["threads"] == cores
    assert result["framework_version"] == installed_version(FRAMEWORKS[framework].imports[0])
    assert "measured" in first.stdout and f"{result['tflops']:.3f} TFLOP/s" in first.stderr
    written = cache.stat().st_mtime_ns
    second = parbench(*args, env={CACHE_ENV: str(cache)})
    assert second.returncode == 0, second.stderr
    assert "cached" in second.stderr and "cached" in second.stdout
    assert cache.stat().st_mtime_ns == written
    third = parbench(*args[:-1], "128", env={CACHE_ENV: str(cache)})  # other sizes: measured
    assert third.returncode == 0 and "measured" in third.stdout, third.stderr
    (entry,) = json.loads(cache.read_text())["entries"]  # replaced
    assert [figure["size"] for figure in entry["result"]["sizes"]] == [128]


# What a framework's peak process ran its products with, observed inside it by a sitecustomize
# module on PYTHONPATH (parbench.run.matmul.time_sizes wrapped): the thread count the framework
# itself reports once the products ran (torch's, TensorFlow's intra-op pool, Paddle's OpenMP
# runtime, the threads of XLA's pool as runs count them), with the figure it measured, which
# names its cache entry.
THREADS_PROBE = '''
import json
import os

if os.environ.get("PEAK_THREADS_PROBE"):
    from parbench.run import matmul

    def in_effect(framework):
        if framework == "torch":
            import torch
            return torch.get_num_threads()
        if framework == "tensorflow":
            import tensorflow as tf
            return tf.config.threading.get_intra_op_parallelism_threads()
        if framework == "paddle":
            from parbench.frameworks.paddle.runtime import compute_threads
            return compute_threads()
        from parbench.frameworks.jax.runtime import pool_threads
        return pool_threads()

    timed = matmul.time_sizes

    def time_sizes(product, sizes, budget):
        result = timed(product, sizes, budget)
        seen = {"tflops": result["tflops"], "threads": in_effect(product.framework),
                "omp": os.environ.get("OMP_NUM_THREADS")}
        folder = os.environ["PEAK_THREADS_PROBE"]
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as probe:
            json.dump(seen, probe)
        return result

    matmul.time_sizes = time_sizes
'''


@pytest.mark.slow
@pytest.mark.parametrize("framework", [
    pytest.param("torch", marks=needs("torch")),
    pytest.param("tensorflow", marks=needs("tensorflow")),
    pytest.param("paddle", marks=needs("paddle")),
    pytest.param("jax", marks=needs("jax"))])
def test_each_entry_is_keyed_by_the_threads_its_products_ran_with(tmp_path, framework):
    """Two thread counts in one command, 1 and one more than the cores (neither is what a
    framework takes by default, every core): two entries, each keyed by the threads its
    framework process really computed with, and its figure plausible. A framework that ignored
    --threads would compute on every core under a key that says otherwise."""
    (tmp_path / "sitecustomize.py").write_text(THREADS_PROBE)
    probes = tmp_path / "probes"
    probes.mkdir()
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    cache, asked = tmp_path / "peak.json", [1, len(os.sched_getaffinity(0)) + 1]
    done = parbench("peak", "--framework", framework, "--dtype", "float32", "--threads",
                    ",".join(map(str, asked)), "--sizes", "128",
                    env={CACHE_ENV: str(cache), "PYTHONPATH": path,
                         "PEAK_THREADS_PROBE": str(probes)})
    assert done.returncode == 0, done.stderr
    seen = {probe["tflops"]: probe for probe in
            (json.loads(found.read_text()) for found in probes.iterdir())}
    entries = json.loads(cache.read_text())["entries"]
    assert sorted(entry["key"]["threads"] for entry in entries) == asked
    assert len(seen) == len(entries)  # a process per entry
    for entry in entries:
        result, threads = entry["result"], entry["key"]["threads"]
        assert result["threads"] == threads
        assert seen[result["tflops"]]["threads"] == threads, (framework, seen, entry["key"])
        assert seen[result["tflops"]]["omp"] == str(threads)
        # More threads than cores, beside the rest of the suite, can spin-wait down to well
        # under a GFLOP/s (Paddle's OpenMP pool measured 0.5 on 2 AMD EPYC vCPUs under CI):
        # that entry's figure is only held to be a real, bounded measurement.
        if threads > len(os.sched_getaffinity(0)):
            assert 0 < result["tflops"] < ceiling(), result
        else:
            assert plausible(result["tflops"]), result
        assert [figure["size"] for figure in result["sizes"]] == [128]
        assert result["framework_version"] == installed_version(
            FRAMEWORKS[framework].imports[0])


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_the_defaults_are_what_a_one_and_a_two_process_cpu_run_get():
    plan = peak_plan(build_parser().parse_args(["peak"]))
    cores = len(os.sched_getaffinity(0))
    assert plan.threads == list(dict.fromkeys([cores, max(1, cores // 2)]))
    assert plan.device == "cpu"
    assert peak_plan(build_parser().parse_args(["peak", "--threads", "3,1,3"])).threads == [3, 1]
    assert plan.dtypes == ["float32", "bfloat16"] and plan.sizes == list(CPU_SIZES)
    assert plan.frameworks == [name for name, framework in FRAMEWORKS.items()
                               if framework.missing_reason() is None]
