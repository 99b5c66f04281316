"""Comparison tables from records: one row per backend x devices, medians over repeats."""

from __future__ import annotations

import csv
import io
from collections import defaultdict

import numpy as np
from tabulate import tabulate

COLUMNS = ("backend", "devices", "launcher", "status", "runs", "samples/s", "step ms (p50)",
           "step ms (p90)", "startup s", "first step s", "accuracy", "loss", "peak RSS MiB/rank",
           "peak device MiB")


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _row(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["status"] == "ok"]
    first = runs[0]
    failed = [r for r in runs if r["status"] != "ok"]
    status = "ok" if not failed else (
        f"{len(failed)}/{len(runs)} {failed[0]['status']}: "
        f"{(failed[0]['error'] or '').splitlines()[0][:60]}")
    metric = lambda get: _median([get(r["metrics"]) for r in ok]) if ok else None  # noqa: E731
    device = metric(lambda m: max(m["peak_device_mb"]) if m["peak_device_mb"] else None)
    return {
        "backend": first["backend"], "devices": first["world_size"],
        "launcher": first["launcher"], "status": status, "runs": len(runs),
        "samples/s": metric(lambda m: m["throughput"]),
        "step ms (p50)": metric(lambda m: m["step_time_ms"]["median"]),
        "step ms (p90)": metric(lambda m: m["step_time_ms"]["p90"]),
        "startup s": metric(lambda m: m["startup_s"]),
        "first step s": metric(lambda m: m["first_step_s"]),
        "accuracy": metric(lambda m: m["final_accuracy"]),
        "loss": metric(lambda m: m["final_loss"]),
        "peak RSS MiB/rank": metric(lambda m: max(m["peak_rss_mb"])),
        "peak device MiB": device if device is not None else "n/a (CPU)",
    }


def group_rows(records: list[dict]) -> dict[str, list[dict]]:
    """Rows per spec_sha256: runs of different contracts are never compared in one table."""
    runs = defaultdict(list)
    for record in records:
        runs[(record["spec_sha256"], record["backend"], record["world_size"],
              record["launcher"])].append(record)
    groups: dict[str, list[dict]] = defaultdict(list)
    for key in sorted(runs, key=lambda k: (k[0], k[1], k[2], k[3])):
        groups[key[0]].append(_row(runs[key]))
    return dict(groups)


def _describe_group(sha: str, records: list[dict]) -> str:
    r = next(rec for rec in records if rec["spec_sha256"] == sha)
    return (f"spec {sha[:10]}: model {r['model']}, dataset {r['dataset']}, global batch "
            f"{r['global_batch']} ({r['batch_mode']} fixed), lr {r['lr']:g}, seed {r['seed']}")


def render(records: list[dict], fmt: str = "md") -> str:
    """The comparison as Markdown (one table per spec group) or CSV (one table, spec column)."""
    groups = group_rows(records)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=("spec_sha256", *COLUMNS))
        writer.writeheader()
        for sha, rows in groups.items():
            writer.writerows({"spec_sha256": sha, **row} for row in rows)
        return out.getvalue()
    parts = []
    if len(groups) > 1:
        parts.append(f"{len(groups)} different specs: runs are grouped and never mixed.")
    for sha, rows in groups.items():
        parts.append(f"### {_describe_group(sha, records)}\n")
        parts.append(tabulate([[row[c] for c in COLUMNS] for row in rows], headers=COLUMNS,
                              tablefmt="github", floatfmt=".4g", missingval="-"))
    return "\n\n".join(parts) + "\n"
