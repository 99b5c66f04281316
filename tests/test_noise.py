"""Noise control in parbench compare: round-robin order, discarded warm-up runs, the machine's
load in every record, and the warning before a sweep on a busy machine. No assertion here is
on a duration: the order comes from the progress lines, the load fields from CPU accounting."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs, parbench, records_in
from parbench.base.errors import UsageError
from parbench.cli import compare
from parbench.cli.compare import Slot, busy_warning, round_order, schedule
from parbench.cli.sweep_state import SWEEP_STATE, open_sweep
from parbench.launch.load import LoadSample, load_env
from parbench.results.records import (
    BUSY_LOAD_PER_CORE,
    SCHEMA_VERSION,
    check_record,
    machine_busy,
    run_was_busy,
)

V1_RECORD = Path(__file__).parents[1] / "results/claims/runs/torch-single-n1-5ea9a70372-r0.json"
LOAD = {"load_1m_start": 0.4, "load_1m_end": 0.6, "other_cpu_s": 0.05}
STARTED = re.compile(r"^\[(\d+)/(\d+)\] (\S+) x1 (warm-up|repeat) (\d+)/(\d+): running",
                     re.MULTILINE)
# Spends half a CPU second, says so, then waits for stdin to close before it exits.
BURNER = ("import sys, time\nwhile time.process_time() < 0.5: pass\nprint('done', flush=True)\n"
          "sys.stdin.read()")


def test_schedule_runs_rounds_each_in_its_own_shuffled_order_warmups_first():
    seed = 11
    order = [round_order(3, seed, 0, warmup=True), *(round_order(3, seed, r) for r in range(4))]
    assert all(sorted(o) == [0, 1, 2] for o in order)  # every configuration once a round
    assert len({tuple(o) for o in order}) > 1  # and not one fixed order
    assert any(round_order(3, seed, r) != round_order(3, seed + 1, r) for r in range(4))
    slots = schedule([2, 2, 1], 1, set(), seed)
    assert slots[:3] == [Slot(c, 0, True) for c in round_order(3, seed, 0, warmup=True)]
    assert slots[3:6] == [Slot(c, 0, False) for c in round_order(3, seed, 0)]
    assert slots[6:] == [Slot(c, 1, False) for c in round_order(3, seed, 1) if c != 2]
    # --resume: a configuration whose every repeat is kept gets no warm-up; the others do
    assert sorted(s.config for s in schedule([2, 2], 1, {0}, seed) if s.warmup) == [1]


def test_a_sweep_keeps_its_identity_in_its_folder_for_resume(tmp_path):
    first = open_sweep(tmp_path / "out", resume=False, order_seed=None)
    assert (tmp_path / "out" / SWEEP_STATE).exists() and 0 <= first.order_seed < 2**31
    assert open_sweep(tmp_path / "out", resume=True, order_seed=None) == first
    assert open_sweep(tmp_path / "out", resume=False, order_seed=3).id != first.id  # a new one
    with pytest.raises(UsageError, match="whose order seed is 3, not 4"):
        open_sweep(tmp_path / "out", resume=True, order_seed=4)
    (tmp_path / "out" / SWEEP_STATE).write_text("{")
    with pytest.raises(UsageError, match="cannot read"):
        open_sweep(tmp_path / "out", resume=True, order_seed=None)
    assert first.block(2) == {"id": first.id, "order_seed": first.order_seed, "position": 2}


def test_busy_warning_only_above_half_a_load_per_core(monkeypatch, capsys):
    assert BUSY_LOAD_PER_CORE == 0.5  # the report's noisy mark reads the same constant
    assert busy_warning(1.0, 2) is None and not machine_busy(1.0, 2)  # "above", not "at"
    line = busy_warning(3.1, 2)
    assert machine_busy(1.01, 2) and line.startswith("parbench: warning: the machine is busy")
    assert "1-minute load 3.1 on 2 cores" in line and "\n" not in line
    # warn_if_busy reads the 1-minute figure (not the 5- or 15-minute one) and the cores
    monkeypatch.setattr(compare.os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    monkeypatch.setattr(compare, "cpu_count", lambda: 4)
    compare.warn_if_busy()
    assert "1-minute load 2.5 on 4 cores" in capsys.readouterr().err
    monkeypatch.setattr(compare.os, "getloadavg", lambda: (1.9, 9.0, 9.0))
    compare.warn_if_busy()
    assert capsys.readouterr().err == ""


def _burn(reap_first: bool) -> tuple[LoadSample, LoadSample]:
    """Samples around a child that spends 0.5 CPU s; the second is taken after the child was
    reaped, or while it still lives (its time then is not yet ours: like another process's)."""
    before = LoadSample.now()
    child = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "done\n"
    if reap_first:
        child.communicate()
    after = LoadSample.now()
    child.communicate()
    return before, after


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="other_cpu_s needs /proc/stat")
def test_other_cpu_s_counts_what_is_not_ours():
    before, after = _burn(reap_first=True)
    assert after.ours_cpu_s - before.ours_cpu_s >= 0.45  # a reaped child's time is ours
    assert after.busy_cpu_s - before.busy_cpu_s >= 0.25  # /proc/stat saw it on our cores
    # other = the cores' busy time less ours: the child's 0.5 s are taken out (whatever else
    # ran meanwhile stays in), and never below 0
    others = (after.busy_cpu_s - before.busy_cpu_s) - (after.ours_cpu_s - before.ours_cpu_s)
    assert load_env(before, after)["other_cpu_s"] == round(max(0.0, others), 2)
    before, after = _burn(reap_first=False)
    assert after.ours_cpu_s - before.ours_cpu_s < 0.45
    assert load_env(before, after)["other_cpu_s"] >= 0.25  # counted, in clock ticks


def test_load_env_without_proc_stat_and_clamped():
    quiet, later = LoadSample(0.2, None, 1.0), LoadSample(0.3, None, 2.0)
    assert load_env(quiet, later) == {"load_1m_start": 0.2, "load_1m_end": 0.3,
                                      "other_cpu_s": None}
    # tick accounting can put ours above the cores' busy time: that is no negative CPU time
    assert load_env(LoadSample(0.2, 10.0, 1.0), LoadSample(0.3, 10.5, 1.6))["other_cpu_s"] == 0


def test_check_reads_v1_and_wants_the_load_in_v2(tmp_path):
    old = json.loads(V1_RECORD.read_text())
    assert old["schema_version"] == 1 and check_record(old) == []
    new = copy.deepcopy(old)
    new.update(schema_version=2, variant={"threads": 2, "nnodes": 1}, run_id="v2")
    new["env"].update(network_isolated=False)
    problems = check_record(new)
    assert len(problems) == 3 and all(p.startswith("env: ") for p in problems)
    assert all(field in " ".join(problems) for field in LOAD)
    new["env"].update(LOAD, other_cpu_s=-1.0)
    assert check_record(new) == ["env/other_cpu_s: -1.0 is less than the minimum of 0"]
    new["env"]["other_cpu_s"] = None  # where the OS does not say
    assert check_record(new) == []
    shutil.copy(V1_RECORD, tmp_path)
    (tmp_path / "v2.json").write_text(json.dumps(new))
    result = parbench("check", str(tmp_path))
    assert result.returncode == 0 and "2 record(s) checked, 0 problem(s)" in result.stdout


ORDER_SEED = 5
SWEEP = ["compare", "torch-single", "torch-dp", "--devices", "1", "--steps", "2",
         "--global-batch", "32", "--repeats", "2", "--warmup-runs", "1", "--model", "mlp",
         "--order-seed", str(ORDER_SEED)]


@pytest.mark.slow
@needs("torch")
def test_compare_warms_up_then_runs_round_robin(tmp_path):
    out = tmp_path / "runs"
    args = [*SWEEP, "--out", str(out), "--report-dir", str(tmp_path / "report")]
    result = parbench(*args)
    assert result.returncode == 0, result.stderr
    started = [(backend, kind, int(n)) for _, total, backend, kind, n, _
               in STARTED.findall(result.stderr) if total == "6"]
    names = ("torch-single", "torch-dp")  # each round's order is drawn from --order-seed
    assert started == [(names[c], kind, n) for kind, n, r in (
        ("warm-up", 1, 0), ("repeat", 1, 0), ("repeat", 2, 1))
        for c in round_order(2, ORDER_SEED, r, warmup=kind == "warm-up")]
    assert result.stderr.count("ok (discarded)") == 2
    records = records_in(out)  # the warm-ups were not written
    assert sorted((r["backend"], r["repeat"]) for r in records) == [
        ("torch-dp", 0), ("torch-dp", 1), ("torch-single", 0), ("torch-single", 1)]
    assert len({r["sweep"]["id"] for r in records}) == 1  # one sweep, its place in each round
    assert {(r["backend"], r["repeat"], r["sweep"]["position"], r["sweep"]["order_seed"])
            for r in records} == {(names[c], r, position, ORDER_SEED) for r in (0, 1)
                                  for position, c in enumerate(round_order(2, ORDER_SEED, r))}
    for record in records:
        env = record["env"]
        assert record["schema_version"] == SCHEMA_VERSION and env["load_1m_start"] >= 0
        assert env["load_1m_end"] >= 0
        other = env["other_cpu_s"]
        assert other >= 0 if Path("/proc/stat").exists() else other is None

    resumed = parbench(*args, "--resume")  # every repeat kept: no warm-up either
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("kept (an ok record exists)") == 4
    assert "warm-up" not in resumed.stderr and records_in(out) == records

    shutil.copy(V1_RECORD, out)
    checked = parbench("check", str(out))
    assert checked.returncode == 0 and "5 record(s) checked, 0 problem(s)" in checked.stdout


def test_busy_run_is_judged_by_other_processes_cpu_time_before_the_load_average():
    def record(other_cpu_s, load_1m_start, duration_s=10.0):
        return {"duration_s": duration_s, "env": {"cores": 2, "other_cpu_s": other_cpu_s,
                                                  "load_1m_start": load_1m_start}}

    # the load average still holds the sweep's own previous run: measured CPU time decides
    assert run_was_busy(record(other_cpu_s=0.5, load_1m_start=1.9)) is False
    assert run_was_busy(record(other_cpu_s=10.5, load_1m_start=0.1)) is True  # > 1 core avg
    assert run_was_busy(record(other_cpu_s=None, load_1m_start=1.5)) is True  # fallback
    assert run_was_busy({"duration_s": 5.0, "env": {"cores": 2}}) is None  # schema 1
