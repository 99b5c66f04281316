"""What a compare sweep may vary besides backends and device counts: threads per worker as a
configuration of their own (rows of different threads never merge, and say their threads only
where that tells two apart), and the headline sweep (each framework's declared
representatives only), and seeds (each a configuration: what time to target and "did N
devices change the result" compare over)."""

from __future__ import annotations

import pytest
from test_report import markdown_tables, record
from test_report_intervals import TITLE, on_cpu

from conftest import parbench, records_in
from parbench.base.errors import UsageError
from parbench.cli.compare import (
    headline_backends,
    parse_seeds,
    parse_thread_counts,
    sweep_configs,
)
from parbench.launch.options import RunConfig
from parbench.results.groups import build_groups
from parbench.results.report import render
from parbench.run.registry import BACKENDS, FRAMEWORKS


def threads_runs(backend: str, framework: str, devices: int, threads: int, speed: float,
                 **kw) -> list[dict]:
    return [on_cpu(record(backend, framework, devices, i, speed * f, **kw), threads)
            for i, f in enumerate((0.99, 1.0, 1.01))]


def test_rows_of_other_threads_stay_apart_and_say_their_threads():
    records = [*threads_runs("torch-single", "torch", 1, 1, 100.0),
               *threads_runs("torch-single", "torch", 1, 2, 180.0),
               *threads_runs("torch-ddp", "torch", 2, 1, 150.0, launcher="torchrun")]
    [group] = build_groups(records)
    single = [row for row in group.rows if row.backend == "torch-single"]
    assert [(row.threads, row.throughput) for row in single] == [(1, 100.0), (2, 180.0)]
    ddp = next(row for row in group.rows if row.backend == "torch-ddp")
    assert [row.backend_cell for row in single] == ["torch-single (1 thread)",
                                                    "torch-single (2 threads)"]
    assert ddp.backend_cell == "torch-ddp"  # no other threads of it: nothing to tell apart
    # the 2-core machine's default for one process is 2 threads: the headline shows that row,
    # and scaling efficiency is taken against it, as a plain single run is
    line = next(line for line in markdown_tables(render(records))[("Headline", TITLE)]
                if line["devices"] == "1")
    assert line["approach"] == "torch-single (2 threads)"
    assert ddp.cells["scaling eff."] == pytest.approx(150 / (2 * 180))


def test_thread_counts_are_configurations_of_the_sweep():
    base = RunConfig.of(model="mlp", steps=2, global_batch=32)
    configs, skipped = sweep_configs(base, [BACKENDS["torch-single"]], [1], [1, 2])
    assert [cfg.threads for cfg, _ in configs] == [1, 2] and not skipped
    assert parse_thread_counts("2, 1,2") == [1, 2] and parse_thread_counts(None) is None
    for bad in ("0", "one", ""):
        with pytest.raises(UsageError, match="--thread-counts wants"):
            parse_thread_counts(bad)


def test_seeds_are_configurations_of_the_sweep_each_with_its_own_inputs():
    base = RunConfig.of(model="mlp", steps=2, global_batch=32, seed=5)
    configs, _ = sweep_configs(base, [BACKENDS["torch-single"], BACKENDS["torch-ddp"]], [1],
                               None, None, parse_seeds(3, base.seed))
    assert [(cfg.backend, cfg.seed) for cfg, _ in configs] == [
        ("torch-single", 5), ("torch-single", 6), ("torch-single", 7),
        ("torch-ddp", 5), ("torch-ddp", 6), ("torch-ddp", 7)]
    # a seed is its own weights and data order: the sweep prepares each seed's inputs apart
    assert len({cfg.inputs_key() for cfg, _ in configs}) == 3
    assert parse_seeds(None, 0) is None
    for count, first, message in ((0, 0, "--seeds wants 1 or more"),
                                  (2, 2**31 - 1, "passes the largest seed 2147483647")):
        with pytest.raises(UsageError, match=message):
            parse_seeds(count, first)


def test_a_limit_is_said_once_however_many_seeds():
    base = RunConfig.of(model="mlp", steps=2, global_batch=32)
    _, skipped = sweep_configs(base, [BACKENDS["torch-ddp"]], [64], None, None,
                               parse_seeds(3, 0))
    assert len(skipped) == 1 and "this machine has" in skipped[0].reason


def test_the_headline_sweep_is_each_frameworks_declared_representatives():
    installed = [f for f in FRAMEWORKS.values() if f.missing_reason() is None]
    backends, wanted = headline_backends(None)
    configs, _ = sweep_configs(RunConfig.of(model="mlp", steps=2, global_batch=32), backends,
                               [1, 2], None, wanted)
    chosen = {(cfg.backend, cfg.devices) for cfg, _ in configs}
    assert chosen <= {(f.single, 1) for f in installed} | {(f.representative, 2)
                                                           for f in installed}
    assert ("torch-single", 1) in chosen and ("torch-ddp", 2) in chosen
    assert ("torch-ddp", 1) not in chosen and ("torch-dp", 1) not in chosen


@pytest.mark.parametrize("flags,message", [
    (["--thread-counts", "1,2", "--threads", "1"], "--threads or --thread-counts"),
    (["--headline", "torch-single"], "--headline runs each framework's declared"),
    (["torch-single", "--seeds", "3", "--until-ci", "0.05"], "--seeds or --until-ci"),
    (["torch-single", "--seeds", "0"], "--seeds wants 1 or more; got 0"),
])
def test_conflicting_sweep_flags_are_one_line_and_exit_2(tmp_path, flags, message):
    done = parbench("compare", *flags, "--devices", "1", "--steps", "2", "--out",
                    str(tmp_path / "out"), "--report-dir", str(tmp_path / "report"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_sweep_of_seeds_runs_and_names_each_seed(tmp_path):
    out = tmp_path / "out"
    done = parbench("compare", "torch-single", "--devices", "1", "--seeds", "2", "--seed", "4",
                    "--model", "mlp", "--steps", "2", "--global-batch", "32", "--out", str(out),
                    "--report-dir", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(r["seed"] for r in records_in(out)) == [4, 5]
    for seed in (4, 5):
        assert f"torch-single x1 seed {seed} repeat 1/1: ok" in done.stderr
