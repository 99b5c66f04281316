"""`parbench report` on a hand-made set of valid records whose every figure is computed here by
hand: medians and spread over repeats, scaling efficiency against the right 1-device
reference, failed runs with their reason, specs kept apart, CSV round trip, the HTML page
(tables, inline plots, escaping) and bad input."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from conftest import parbench
from parbench.cli.main import build_parser
from parbench.results.records import check_record

SPEC_A, SPEC_B = "a" * 64, "b" * 64
BATCH = 128
HOSTILE = "<script>alert(1)</script>"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def record(backend: str, framework: str, devices: int, repeat: int = 0,
           throughput: float | None = None, *, spec: str = SPEC_A, launcher: str = "python",
           status: str = "ok", error: str | None = None, accuracy: float = 0.5,
           rss: list[float] | None = None, device_mb: list[float] | None = None,
           to_target: float | None = None, target: float | None = None,
           load: float | None = None) -> dict:
    """A valid record; step times follow from the throughput as the harness computes them;
    ``load``: the 1-minute load at its start (none: a record without the reading)."""
    step_ms = BATCH / throughput * 1000 if throughput else None
    metrics = None if status != "ok" else {
        "throughput": throughput,
        "step_time_ms": {"median": step_ms, "p10": 0.75 * step_ms, "p90": 1.25 * step_ms},
        "startup_s": 1.5 * devices, "first_step_s": 0.25, "eval_s": 0.1,
        "final_accuracy": accuracy, "final_loss": 2 - accuracy,
        "loss_curve": [2.3, 2.0, 1.8, 2 - accuracy],
        "accuracy_curve": [{"step": 2, "accuracy": accuracy / 2, "loss": 2.0, "train_s": 1.0},
                           {"step": 4, "accuracy": accuracy, "loss": 2 - accuracy,
                            "train_s": 2.0}],
        "target_accuracy": target, "time_to_target_s": to_target,
        "peak_rss_mb": rss or [500.0] * devices, "peak_device_mb": device_mb}
    result = {
        "schema_version": 1, "run_id": f"{backend}-{devices}-{repeat}-{spec[0]}",
        "created": "2025-01-01T00:00:00+00:00", "backend": backend, "framework": framework,
        "strategy": "test", "launcher": launcher, "world_size": devices, "status": status,
        "error": error, "seed": 0, "repeat": repeat, "global_batch": BATCH,
        "per_device_batch": BATCH // devices, "batch_mode": "global", "lr": 0.05,
        "lr_scaling": "none", "steps": 4, "dataset": "synthetic",
        "optimizer": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4,
                      "schedule": "cosine", "warmup_steps": 0},
        "model": "resnet" if spec == SPEC_A else "mlp", "spec_sha256": spec, "config": {},
        "metrics": metrics, "duration_s": 10.0, "notes": [],
        "env": {"python": "3.11.2", "os": "Linux-6.1-x86_64", "cpu_model": "Test CPU",
                "cores": 8, "threads_per_worker": 8 // devices, "framework": framework,
                "framework_version": "2.5.1" if status == "ok" else None,
                "device_names": ["NVIDIA H200"] * devices if device_mb else [],
                "cuda_version": "12.4" if device_mb else None,
                "nccl_version": None, "git_commit": "abc1234",
                **({"load_1m_start": load} if load is not None else {})}}
    assert check_record(result) == [], check_record(result)
    return result


RECORDS = [
    *(record("torch-single", "torch", 1, i, t, accuracy=a, rss=[r], target=0.8, to_target=tt)
      for i, (t, a, r, tt) in enumerate([(100.0, 0.80, 500.0, 30.0), (110.0, 0.82, 520.0, 40.0),
                                         (120.0, 0.84, 510.0, None)])),
    # 8 cores: a load above 4.0 at the start makes a run noisy
    *(record("torch-ddp", "torch", 2, i, t, launcher="torchrun", rss=r, target=0.8, to_target=tt,
             load=load)
      for i, (t, r, tt, load) in enumerate([(180.0, [600.0, 580.0], 20.0, 4.5),
                                            (200.0, [560.0, 640.0], 25.0, None)])),
    record("torch-ddp", "torch", 4, launcher="torchrun", status="failed",
           error="exit code 1, rank 3 died\nTraceback (most recent call last): ..."),
    record("torch-dp", "torch", 2, 0, 150.0, rss=[700.0], device_mb=[900.0, 300.0], load=4.01),
    record("tf-mirrored", "tensorflow", 1, 0, 50.0, load=4.0),
    record("tf-mirrored", "tensorflow", 2, 0, 90.0),
    record("tf-mirrored", "tensorflow", 2, 1, status="timeout",
           error="timed out after 900 s\n(the workers printed nothing)"),
    record("paddle-spawn", "paddle", 2, 0, 80.0),
    record("paddle-spawn", "paddle", 2, 1, 84.0, load=0.5),
    record(HOSTILE, "torch", 1, 0, 60.0, spec=SPEC_B),
    record("torch-single", "torch", 1, 0, spec=SPEC_B, status="failed",
           error="<img src=x onerror=alert(2)>\nmore"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    for i, rec in enumerate(RECORDS):  # not write_record: it names files by backend
        (folder / f"{i}.json").write_text(json.dumps(rec))
    return folder


def report(*args: str) -> str:
    """What ``parbench report ARGS`` prints, run in this process: the report code is then
    what the test (and the mutation run, tests/mutation.py) exercises. The real command's
    exit codes and files are tested below."""
    parsed = build_parser().parse_args(["report", *args])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert parsed.func(parsed) == 0
    return printed.getvalue()


def markdown_tables(text: str) -> dict[tuple[str, str], list[dict[str, str]]]:
    """{(section heading, table caption): rows as header -> cell} of a Markdown report."""
    tables, section, caption = {}, "", ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("### "):
            caption = line[4:]
        elif line.startswith("|") and not line.startswith("|--"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            tables.setdefault((section, caption), []).append(cells)
    return {key: [dict(zip(rows[0], row)) for row in rows[1:]] for key, rows in tables.items()}


def by_row(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(row["backend"], row["devices"]): row for row in rows}


TITLE_A = ("spec aaaaaaaaaa: model resnet, dataset synthetic, global batch 128 (global batch "
           "fixed), 4 steps, lr 0.05, seed 0")
TITLE_B = TITLE_A.replace("aaaaaaaaaa", "bbbbbbbbbb").replace("resnet", "mlp")
ORDER_A = [("torch-single", "1"), ("torch-dp", "2"), ("torch-ddp", "2"), ("torch-ddp", "4"),
           ("tf-mirrored", "1"), ("tf-mirrored", "2"), ("paddle-spawn", "2")]


@pytest.fixture(scope="module")
def markdown(runs: Path) -> str:
    return report(str(runs))


def test_performance_table_holds_the_hand_computed_figures(markdown: str) -> None:
    tables = markdown_tables(markdown)
    performance = by_row(tables[(TITLE_A, "Performance")])
    # grouped by framework in registry order, the single-device baseline first
    assert [(r["backend"], r["devices"]) for r in tables[(TITLE_A, "Performance")]] == ORDER_A
    # torch-single: throughput 100/110/120 -> median 110, step 128/110 s, p90 1.25x that;
    # cv: sample sd 10 / mean 110 = 9.091 % > 5 %: noisy; 95% CI: the logs' mean 4.6977 and
    # sd 0.09118, t(0.975, 2 df) = 4.3027: exp(4.6977 -/+ 4.3027 x 0.09118 / sqrt 3) = 87.5-138;
    # the step times' interval is its inverse: 128000 / 137.6 = 930 to 128000 / 87.46 = 1464 ms
    assert performance[("torch-single", "1")] == {
        "backend": "torch-single", "devices": "1", "launcher": "python", "status": "ok",
        "runs": "3/3", "samples/s": "110", "samples/s 95% CI": "87.5-138",
        "CI method": "t, 3 repeats", "cv %": "9.091", "noisy": "cv", "scaling eff.": "1",
        "step ms p50": "1164", "step ms 95% CI": "930-1460", "step ms p90": "1455",
        "startup s": "1.5", "first step s": "0.25"}
    ddp = performance[("torch-ddp", "2")]
    # 190 / (2 x 110) = 0.8636; step: median of 128/180 s and 128/200 s = 675.6 ms; 2 repeats
    # of schema 1 keep no step times: no interval
    assert (ddp["samples/s"], ddp["samples/s 95% CI"], ddp["CI method"], ddp["scaling eff."],
            ddp["step ms p50"], ddp["runs"]) == ("190", "-", "-", "0.8636", "675.6", "2/2")
    # cv: sd sqrt(200) / mean 190 = 7.443 %; repeat 0 started at load 4.5 > 0.5 x 8 cores
    assert (ddp["cv %"], ddp["noisy"]) == ("7.443", "cv+load")
    # one repeat: no cv; load 4.01 > 4.0
    dp = performance[("torch-dp", "2")]
    assert (dp["scaling eff."], dp["cv %"], dp["noisy"]) == ("0.6818", "-", "load")  # 150 / 220
    # no tf-single: the reference is tf-mirrored at 1 device, 90 / (2 x 50); the timed-out
    # repeat stays in the row with its reason
    mirrored = performance[("tf-mirrored", "2")]
    assert (mirrored["scaling eff."], mirrored["runs"], mirrored["status"]) == (
        "0.9", "1/2", "timeout: timed out after 900 s")
    assert (mirrored["cv %"], mirrored["noisy"]) == ("-", "no")  # one ok repeat
    # a load of exactly 0.5 x cores is not busy
    assert performance[("tf-mirrored", "1")]["noisy"] == "no"
    # 80/84: sd sqrt(8) / mean 82 = 3.449 % <= 5 %, loads 0.5 and unknown: not noisy
    spawn = performance[("paddle-spawn", "2")]
    assert (spawn["samples/s"], spawn["cv %"], spawn["noisy"]) == ("82", "3.449", "no")
    assert spawn["scaling eff."] == "-"  # no 1-device paddle run
    failed = performance[("torch-ddp", "4")]
    assert (failed["status"], failed["runs"], failed["samples/s"], failed["scaling eff."]) == (
        "failed: exit code 1, rank 3 died", "0/1", "-", "-")


def test_accuracy_and_memory_table_holds_the_hand_computed_figures(markdown: str) -> None:
    quality = by_row(markdown_tables(markdown)[(TITLE_A, "Accuracy and memory")])
    assert quality[("torch-single", "1")] == {
        "backend": "torch-single", "devices": "1", "launcher": "python", "accuracy": "0.82",
        "Precision macro": "-", "Recall macro": "-", "F1 macro": "-",  # schema 1 has none
        "loss": "1.18", "time to target s": "40", "peak RSS MiB": "510",
        "RSS MiB per rank": "510", "peak device MiB": "n/a (CPU)",
        "device MiB per device": "n/a (CPU)"}
    # max over ranks 600/640 -> 620; per rank medians 580 and 610; target reached at 20, 25 s
    ddp = quality[("torch-ddp", "2")]
    assert (ddp["peak RSS MiB"], ddp["RSS MiB per rank"], ddp["time to target s"]) == (
        "620", "580 / 610", "22.5")
    dp = quality[("torch-dp", "2")]
    assert (dp["peak device MiB"], dp["device MiB per device"]) == ("900", "900 / 300")
    assert quality[("tf-mirrored", "1")]["time to target s"] == "-"  # no target asked for
    assert quality[("torch-ddp", "4")]["peak device MiB"] == "-"  # failed: nothing measured


def test_headline_comes_first_with_each_representative_and_the_cells_not_to_trust(
        markdown: str) -> None:
    assert markdown.index("## Headline") < markdown.index(f"## {TITLE_A}")
    headline = markdown_tables(markdown)[("Headline", TITLE_A)]
    columns = ("devices", "rank", "framework", "approach", "samples/s", "vs fastest",
               "scaling eff.", "RSS MiB per rank", "device MiB per device")
    # per device count, each framework by its representative (torch-dp x2, tf-mirrored x1 and
    # paddle-spawn x2 are not one); torch-ddp x4 failed, so no torch x4; at 2 devices neither
    # row has an interval, so the two share rank 1, undecided (?); the device column because
    # torch-dp ran on devices
    assert [tuple(row[c] for c in columns) for row in headline] == [
        ("1", "1", "torch", "torch-single", "110 (87.5-138)", "1", "1", "510", "n/a (CPU)"),
        ("2", "=1?", "torch", "torch-ddp [torchrun]", "190", "1", "0.864", "580 / 610",
         "n/a (CPU)"),
        ("2", "=1?", "tensorflow", "tf-mirrored", "90", "0.474", "0.9", "500 / 500",
         "n/a (CPU)")]
    assert ("- Not in the headline at 1 device(s): tensorflow (its representative tf-single "
            "did not run there).\n- Not in the headline at 2 device(s): paddle (its "
            "representative paddle-launch did not run there).\n- Not in the headline at 4 "
            "device(s): torch (its representative torch-ddp [torchrun] has no ok repeat).\n"
            ) in markdown
    # spec B's only torch-single failed: a headline with no row, and why
    assert "- Not in the headline at 1 device(s): torch (its representative torch-single " \
        "has no ok repeat)." in markdown
    assert ("- torch: noisy: torch-single x1 (cv 9.1 %), torch-dp x2 (busy machine at start), "
            "torch-ddp [torchrun] x2 (cv 7.4 %, busy machine at start); not ok: torch-ddp "
            "[torchrun] x4 (1 of 1 repeat(s) failed: exit code 1, rank 3 died)\n"
            "- tensorflow: not ok: tf-mirrored x2 (1 of 2 repeat(s) timeout: timed out after "
            "900 s)\n\n") in markdown
    assert "- paddle:" not in markdown
    # 4 records carry a load reading
    assert f"{len(RECORDS) - 4} of {len(RECORDS)} run(s) carry no load reading" in markdown


def test_specs_are_grouped_apart_with_a_note(markdown: str) -> None:
    assert "2 different specs" in markdown
    tables = markdown_tables(markdown)
    spec_b = by_row(tables[(TITLE_B, "Performance")])
    assert set(spec_b) == {(HOSTILE, "1"), ("torch-single", "1")}
    # the failed torch-single of spec B leaves the backend itself as the 1-device reference
    assert spec_b[(HOSTILE, "1")]["scaling eff."] == "1"
    assert spec_b[("torch-single", "1")]["status"] == "failed: <img src=x onerror=alert(2)>"
    assert HOSTILE not in {row["backend"] for row in tables[(TITLE_A, "Performance")]}
    environment = tables[("Environment", "Environment of every run")]
    assert sum(int(row["runs"]) for row in environment) == len(RECORDS)
    dp = next(row for row in environment if row["backend"] == "torch-dp")
    assert (dp["device names"], dp["CUDA"], dp["version"], dp["spec"]) == (
        "2x NVIDIA H200", "12.4", "2.5.1", "aaaaaaaaaa")
    # what no run differs in is said once, under the table
    assert "git commit" not in dp
    assert ("- The same in every run: python 3.11.2, OS Linux-6.1-x86_64, CPU Test CPU, cores 8, "
            "memory GiB -, allocator -, libraries -, NCCL -, git commit abc1234, schema 1."
            ) in markdown


def test_csv_is_tidy_and_round_trips_exact_values(runs: Path) -> None:
    """pandas reads the CSV as it is: one row per cell, numbers as numbers (a missing figure
    is NaN, never '-'), the key columns a reader filters on."""
    import pandas as pd
    table = pd.read_csv(io.StringIO(report(str(runs), "--format", "csv")))
    assert len(table) == 9  # 7 rows of spec A, 2 of spec B
    spec_a = table[table.spec_sha256 == SPEC_A]
    assert list(zip(spec_a.backend, spec_a.devices.astype(str))) == ORDER_A  # the tables' order
    for column in ("throughput", "throughput_low", "cv_percent", "scaling_eff", "step_ms_p50",
                   "final_accuracy", "peak_rss_mib", "devices", "threads_per_worker"):
        assert pd.api.types.is_numeric_dtype(table[column]), column
    assert set(table.framework) == {"torch", "tensorflow", "paddle"}
    assert set(table.model) == {"resnet", "mlp"} and set(table.throughput_unit) == {"samples/s"}
    assert (table.commit == "abc1234").all() and (table.schema == 1).all()
    row = {(r.spec_sha256, r.backend, r.devices): r for r in table.itertuples()}
    ddp = row[(SPEC_A, "torch-ddp", 2)]
    assert (ddp.throughput, ddp.launcher, ddp.threads_per_worker, ddp.total_threads) == (
        190.0, "torchrun", 4, 8)
    assert ddp.cv_percent == pytest.approx(100 * 200 ** 0.5 / 190, rel=1e-12)
    assert ddp.noisy == "cv+load" and pd.isna(row[(SPEC_A, "torch-dp", 2)].cv_percent)
    assert ddp.scaling_eff == 190 / (2 * 110) and pd.isna(ddp.throughput_low)
    # the key columns a reader filters and joins on, in their order, and what they hold
    keys = {"spec_sha256": SPEC_A, "framework": "torch", "framework_version": "2.5.1",
            "backend": "torch-ddp", "launcher": "torchrun", "devices": 2, "nodes": 1,
            "model": "resnet", "task": "image-classification", "dataset": "synthetic",
            "global_batch": BATCH, "batch_mode": "global", "steps": 4, "seed": 0,
            "precision": "fp32", "compile": False, "sync_bn": False, "grad_accum": 1,
            "input": "arrays", "loader_workers": 0, "reshard_after_forward": None,
            "threads_per_worker": 4, "total_threads": 8, "commit": "abc1234", "schema": 1,
            "cpu": "Test CPU", "throughput_unit": "samples/s"}
    assert list(table.columns[:len(keys)]) == list(keys)
    assert {k: None if pd.isna(v) else v for k, v in ddp._asdict().items() if k in keys} == keys
    assert ddp.step_ms_p50 == (BATCH / 180 * 1000 + BATCH / 200 * 1000) / 2
    assert [float(v) for v in ddp.rss_mib_per_rank.split(";")] == [580.0, 610.0]
    single = row[(SPEC_A, "torch-single", 1)]
    assert single.step_ms_p90 == 1.25 * (BATCH / 110 * 1000)
    assert single.final_accuracy == 0.82 and single.ci_method == "t, 3 repeats"
    assert (single.throughput_low, single.throughput_high) == pytest.approx((87.46, 137.59),
                                                                            abs=0.01)
    failed = row[(SPEC_A, "torch-ddp", 4)]
    assert failed.status == "failed: exit code 1, rank 3 died" and pd.isna(failed.throughput)
    assert row[(SPEC_B, HOSTILE, 1)].launcher == "python"


@pytest.mark.slow
def test_html_is_self_contained_escaped_and_plots_are_pngs(runs: Path, tmp_path: Path) -> None:
    page, plots = tmp_path / "out" / "report.html", tmp_path / "plots"
    assert report(str(runs), "--format", "html", "--output", str(page),
                  "--plots", str(plots)) == ""
    html = page.read_text()
    # every table: the headline and the other approaches per spec, 2 per spec and the
    # environment
    assert html.count("<table>") == 9
    for heading in ("Headline", TITLE_A, TITLE_B, "Performance", "Accuracy and memory",
                    "Environment"):
        assert f">{heading}<" in html
    assert html.index("<h2>Headline</h2>") < html.index(f"<h2>{TITLE_A}</h2>")
    # a framework's first row, noisy and failed rows are marked for the eye
    assert '<tr class="first noisy">' in html and '<tr class="failed">' in html
    assert "<td>0.8636</td>" in html and "<td>900 / 300</td>" in html
    assert HOSTILE not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "http://" not in html and "https://" not in html  # opens offline
    # 4 figures per spec with an ok run and the forest plot of spec A's headline (spec B's has
    # no row), inline and as files, both next to the page and in DIR
    beside = sorted(p.name for p in page.parent.glob("report-*.png"))
    assert len(beside) == 9 and html.count('<img src="data:image/png;base64,') == 9
    assert html.index('alt="Headline: each framework against the fastest') < html.index(
        "<table>")
    assert sorted(f"report-{p.name}" for p in plots.glob("*.png")) == beside
    for png in [*plots.glob("*.png"), *page.parent.glob("*.png")]:
        assert png.read_bytes().startswith(PNG_SIGNATURE) and png.stat().st_size > 1000
    assert not [p for p in tmp_path.rglob("*.tmp")]


def _invalid(folder: Path) -> None:
    broken = dict(RECORDS[0], world_size=0)
    folder.mkdir()
    (folder / "broken.json").write_text(json.dumps(broken))


@pytest.mark.parametrize("case", ["missing", "empty", "invalid"])
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    if case == "empty":
        folder.mkdir()
    elif case == "invalid":
        _invalid(folder)
    page = tmp_path / "report.html"
    done = parbench("report", str(folder), "--format", "html", "--output", str(page),
                    "--plots", str(tmp_path / "plots"), timeout=120)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("parbench: error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["runs"] if case != "missing" else [])


def test_output_that_is_a_folder_is_exit_2(runs: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    done = parbench("report", str(runs), "--output", str(taken), timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert list(taken.iterdir()) == [] and not list(tmp_path.glob(".*.tmp"))


def test_markdown_needs_no_matplotlib_and_html_says_it_does(runs: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n")
    env = {"PYTHONPATH": str(shadow.parent)}
    done = parbench("report", str(runs), env=env, timeout=120)
    assert done.returncode == 0 and "| torch-ddp " in done.stdout, done.stderr
    page = tmp_path / "report.html"
    done = parbench("report", str(runs), "--format", "html", "--output", str(page), env=env,
                    timeout=120)
    assert done.returncode == 2 and "plots need matplotlib" in done.stderr
    assert not page.exists()
