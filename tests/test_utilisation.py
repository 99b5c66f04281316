"""metrics.flops (parbench.results.utilisation) and what the report makes of it: the spec's
FLOPs over the step time, utilisation of the measured matmul peak, MFU against a datasheet
peak, each computed here by hand; and a real run, whose record holds the figures of the spec
and of the peak ``parbench peak`` left in the cache it reads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_report import BATCH, by_row, markdown_tables, record, report

from conftest import needs, parbench, records_in
from parbench.contract.flops import model_flops, step_flops
from parbench.contract.spec import build_spec
from parbench.results.records import check_record
from parbench.results.utilisation import flops_metrics, peak_threads
from parbench.run.datasheet import datasheet_peak
from parbench.run.peak import CACHE_ENV, store

SPEC = build_spec("resnet", (3, 32, 32), 10)
PER_STEP = step_flops(SPEC, BATCH)


def hardware(gpu_model: str | None = None, dtype: str | None = "float32",
             peak_threads: int = 1, nodes: int = 1) -> dict:
    return {"framework": "torch", "framework_version": "0.0-test", "compute_dtype": dtype,
            "peak_threads": peak_threads, "nodes": nodes, "gpu_model": gpu_model}


def cache_with(path: Path, tflops_by_threads: dict[int, float]) -> None:
    """A peak cache whose entries say these torch 0.0-test float32 CPU peaks were measured."""
    for threads, tflops in tflops_by_threads.items():
        store({"framework": "torch", "framework_version": "0.0-test", "dtype": "float32",
               "threads": threads, "device": "cpu", "tflops": tflops}, path)


@pytest.mark.parametrize("one_process,devices,threads,expected", [
    (True, 2, 2, 2), (False, 2, 1, 2), (False, 4, 1, 4), (True, 1, 2, 2), (False, 1, 2, 2)])
def test_the_peak_is_of_every_thread_the_run_had_on_a_node(one_process, devices, threads,
                                                            expected):
    assert peak_threads(threads, one_process, devices) == expected


def test_one_process_and_several_of_the_same_cores_share_one_utilisation(tmp_path,
                                                                         monkeypatch):
    """tf-mirrored x2 (one process, 2 threads) and torch-ddp x2 (2 processes of 1 thread) at
    the same FLOP/s are held against the same 2-thread peak, so they read the same share;
    before schema 11 one read 2x the other (a device's share of one worker's peak)."""
    cache_with(tmp_path / "peak.json", {1: 0.05, 2: 0.08})
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "peak.json"))
    mirrored = flops_metrics(SPEC, BATCH, 250.0, 2, hardware(peak_threads=peak_threads(
        2, True, 2)))
    ddp = flops_metrics(SPEC, BATCH, 250.0, 2, hardware(peak_threads=peak_threads(1, False, 2)))
    achieved = PER_STEP / 0.25 / 1e12
    assert mirrored["utilisation"] == ddp["utilisation"] == pytest.approx(achieved / 0.08)
    assert mirrored["measured_peak_tflops"] == 0.08 and mirrored["peak_threads"] == 2
    two_nodes = flops_metrics(SPEC, BATCH, 250.0, 4, hardware(peak_threads=2, nodes=2))
    assert two_nodes["measured_peak_tflops"] == 0.16  # each node's cores, both nodes
    assert two_nodes["utilisation"] == pytest.approx(achieved / 0.16)


def test_achieved_flops_are_the_specs_over_the_step_time(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "none.json"))  # nothing measured
    flops = flops_metrics(SPEC, BATCH, step_ms=250.0, world_size=2, hardware=hardware())
    assert flops["per_step"] == PER_STEP == BATCH * 3 * 6_472_320
    assert flops["per_sample"] == model_flops(SPEC).training_per_sample
    assert flops["achieved_tflops"] == pytest.approx(PER_STEP / 0.25 / 1e12, rel=1e-12)
    assert flops["achieved_tflops_per_device"] == pytest.approx(PER_STEP / 0.5 / 1e12)
    # a CPU run without a measured peak: no share of anything, never a guessed one
    assert flops["measured_peak_tflops"] is flops["utilisation"] is None
    assert flops["datasheet_peak_tflops"] is flops["mfu"] is None


def test_mfu_is_against_the_gpus_datasheet_and_none_for_an_unknown_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "none.json"))
    h200 = flops_metrics(SPEC, BATCH, 250.0, 1, hardware("NVIDIA H200", "bfloat16"))
    assert h200["datasheet_peak_tflops"] == datasheet_peak("NVIDIA H200", "bfloat16")
    assert h200["mfu"] == pytest.approx(PER_STEP / 0.25 / 1e12 / h200["datasheet_peak_tflops"])
    unknown = flops_metrics(SPEC, BATCH, 250.0, 1, hardware("Some Future GPU", "bfloat16"))
    assert unknown["datasheet_peak_tflops"] is unknown["mfu"] is None
    # a framework that did not say what it computed in gets neither peak
    blind = flops_metrics(SPEC, BATCH, 250.0, 1, hardware("NVIDIA H200", None))
    assert blind["datasheet_peak_tflops"] is blind["mfu"] is None


def with_flops(rec: dict, utilisation: float | None, mfu: float | None = None) -> dict:
    """A report test record (test_report.record) with metrics.flops for its step time."""
    step_s = rec["metrics"]["step_time_ms"]["median"] / 1000
    achieved = PER_STEP / step_s / 1e12
    per_device = achieved / rec["world_size"]
    rec["metrics"]["flops"] = {
        "convention": "test", "per_step": PER_STEP, "per_sample": PER_STEP // BATCH,
        "achieved_tflops": achieved, "achieved_tflops_per_device": per_device,
        "measured_peak_tflops": None if utilisation is None else achieved / utilisation,
        # peak_threads: the whole run's utilisation (schema 11), which the report shows
        "utilisation": utilisation, "peak_threads": 1,
        "datasheet_peak_tflops": None if mfu is None else per_device / mfu, "mfu": mfu}
    assert check_record(rec) == [], check_record(rec)
    return rec


def write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir()
    for i, rec in enumerate(records):
        (folder / f"{i}.json").write_text(json.dumps(rec))
    return folder


def test_the_report_shows_flops_utilisation_and_how_far_each_framework_is(tmp_path):
    folder = write(tmp_path / "runs", [
        with_flops(record("torch-single", "torch", 1, 0, 100.0), 0.25),
        with_flops(record("torch-ddp", "torch", 2, 0, 150.0, launcher="torchrun"), 0.1),
        with_flops(record("tf-mirrored", "tensorflow", 1, 0, 50.0), 0.125)])
    text = report(str(folder))
    performance = by_row(next(rows for (_, caption), rows in markdown_tables(text).items()
                              if caption == "Performance"))
    single = performance[("torch-single", "1")]
    # 100 samples/s of 128 per step: 1.28 s a step
    assert float(single["TFLOP/s"]) == pytest.approx(PER_STEP / 1.28 / 1e12, rel=1e-3)
    assert single["util. %"] == "25" and performance[("torch-ddp", "2")]["util. %"] == "10"
    assert float(performance[("torch-ddp", "2")]["TFLOP/s per device"]) == pytest.approx(
        PER_STEP / (128 / 150) / 2 / 1e12, rel=1e-3)
    assert "MFU %" not in single  # no row ran on a GPU with a datasheet peak
    assert ("torch: closest to the limit torch-single x1, 25 % of the measured matmul peak "
            "of every core it used; farthest torch-ddp [torchrun] x2, 10 %.") in text
    assert "tensorflow: closest to the limit tf-mirrored x1, 12.5 %" in text


def test_a_utilisation_of_one_workers_peak_is_not_shown(tmp_path):
    """Before schema 11 (no flops.peak_threads) utilisation was a device's share of one
    worker's peak: the report shows no such figure beside the whole run's."""
    old = with_flops(record("torch-ddp", "torch", 2, 0, 150.0, launcher="torchrun"), 0.1)
    del old["metrics"]["flops"]["peak_threads"]
    folder = write(tmp_path / "runs", [with_flops(record("torch-single", "torch", 1, 0, 100.0),
                                                  0.25), old])
    performance = by_row(next(rows for (_, caption), rows in markdown_tables(
        report(str(folder))).items() if caption == "Performance"))
    assert performance[("torch-single", "1")]["util. %"] == "25"
    assert performance[("torch-ddp", "2")]["util. %"] == "-"


def test_records_without_flops_show_no_flops_columns(tmp_path):
    text = report(str(write(tmp_path / "runs", [record("torch-single", "torch", 1, 0, 100.0)])))
    headers = {header for rows in markdown_tables(text).values() for header in rows[0]}
    assert "samples/s" in headers and not headers & {"TFLOP/s", "TFLOP/s per device", "util. %"}
    assert "closest to the limit" not in text


@pytest.mark.slow
@needs("torch")
def test_a_run_reads_the_peak_parbench_peak_measured(tmp_path):
    """parbench peak fills a private cache; a run with that cache holds the spec's FLOPs over
    its step time and that peak's share. The run's threads (1) are the measured peak's."""
    env = {CACHE_ENV: str(tmp_path / "peak.json")}
    run = ("run", "torch-single", "--steps", "6", "--global-batch", "32", "--threads", "1")
    unmeasured = parbench(*run, "--out", str(tmp_path / "before"), env=env)
    assert unmeasured.returncode == 0, unmeasured.stderr
    (before,) = records_in(tmp_path / "before")
    assert before["metrics"]["flops"]["utilisation"] is None  # runs never measure it
    assert "parbench: no utilisation: torch " in unmeasured.stderr
    assert "('parbench peak --framework torch --threads 1' measures it)" in unmeasured.stderr
    measured = parbench("peak", "--framework", "torch", "--dtype", "float32", "--threads", "1",
                        env=env)
    assert measured.returncode == 0, measured.stderr
    done = parbench(*run, "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stderr
    assert "no utilisation" not in done.stderr
    (run,) = records_in(tmp_path / "out")
    flops, step_s = run["metrics"]["flops"], run["metrics"]["step_time_ms"]["median"] / 1000
    assert flops["per_step"] == step_flops(build_spec("resnet", (3, 32, 32), 10), 32)
    assert flops["achieved_tflops"] == pytest.approx(flops["per_step"] / step_s / 1e12)
    (entry,) = json.loads((tmp_path / "peak.json").read_text())["entries"]
    assert flops["measured_peak_tflops"] == entry["result"]["tflops"] > 0
    assert flops["utilisation"] == pytest.approx(
        flops["achieved_tflops"] / entry["result"]["tflops"])
    assert flops["peak_threads"] == 1
    assert 0 < flops["utilisation"] < 1 and math.isfinite(flops["utilisation"])
    assert flops["mfu"] is None  # a CPU has no datasheet peak


def test_a_corrupt_peak_cache_costs_the_figure_not_the_record(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "peak.json"
    cache.write_text("{not json")
    monkeypatch.setenv(CACHE_ENV, str(cache))
    flops = flops_metrics(SPEC, BATCH, 250.0, 1, hardware())
    assert flops["utilisation"] is None and flops["achieved_tflops"] > 0
    assert f"the peak cache {cache} is not JSON" in capsys.readouterr().err


def with_cpu(rec: dict, busy: float, threads: int = 1) -> dict:
    """The record's ranks spent ``busy`` of threads x their wall step time on the CPU."""
    step_ms = rec["metrics"]["step_time_ms"]["median"]
    rec["env"]["threads_per_worker"] = threads
    rec["metrics"]["cpu_ms_per_step"] = {"user": [0.9 * busy * threads * step_ms] *
                                         rec["world_size"],
                                         "system": [0.1 * busy * threads * step_ms] *
                                         rec["world_size"]}
    return rec


def test_cpu_time_beside_wall_time_and_the_rows_where_they_part(tmp_path):
    """torch-single keeps its 2 threads busy (95 %); torch-ddp's ranks are on the CPU 30 % of
    each step (waiting in the all-reduce), tf-single's 1 thread 160 % (threads beyond the one
    asked for): only those two are named, with their figures."""
    folder = write(tmp_path / "runs", [
        with_cpu(record("torch-single", "torch", 1, 0, 100.0), 0.95, threads=2),
        with_cpu(record("torch-ddp", "torch", 2, 0, 150.0, launcher="torchrun"), 0.30),
        with_cpu(record("tf-single", "tensorflow", 1, 0, 100.0), 1.6)])
    text = report(str(folder))
    performance = by_row(next(rows for (_, caption), rows in markdown_tables(text).items()
                              if caption == "Performance"))
    single, ddp = performance[("torch-single", "1")], performance[("torch-ddp", "2")]
    assert (single["CPU busy %"], ddp["CPU busy %"]) == ("95", "30")
    assert float(single["CPU ms/step per rank"]) == pytest.approx(0.95 * 2 * 1280, rel=1e-3)
    assert ("CPU time differs from threads x wall time by more than 20 %" in text
            and "torch-ddp [torchrun] x2 30 % (256 ms CPU against 853 ms wall)" in text)
    assert "tf-single x1 160 % (2.05e+03 ms CPU against 1.28e+03 ms wall)" in text
    assert "torch-single x1 95 %" not in text
