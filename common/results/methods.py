"""The report's "How the figures are made": one paragraph per kind of figure, said once for
every table, in the words of the columns they explain."""

from __future__ import annotations

from parbench.run.modes import MODES

from .intervals import BOOTSTRAP_RESAMPLES, REPEATS_FOR_T
from .records import BUSY_LOAD_PER_CORE
from .rows import MODE_COLUMNS, NOISY_CV_PERCENT, Group, throughput_column

NODES_NOTE = (
    "Multi-node runs have rows of their own, after their framework's single-node rows, with "
    "devices shown as nodes x devices per node (2x1: 2 nodes of 1 device); in their scaling "
    "efficiency N is the device count over all nodes (world_size).")


def notes(speed: str) -> list[str]:
    """How the figures are made; ``speed`` names the throughput column(s) ('samples/s')."""
    return [
        "Each cell is the median over the row's ok repeats; runs counts ok/all repeats.",
        f"95% CI: the confidence interval of {speed} (and, in the CSV, of the median step "
        f"time). With {REPEATS_FOR_T} or more ok repeats: Student's t over the repeats, on the "
        "log of each repeat's figure (an interval of their geometric mean). With fewer: a "
        f"percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples) of the steady steps within "
        "each run (each resample draws every run's steps with replacement and takes the "
        "geometric mean of the runs' median step times); it knows nothing of run-to-run "
        "variation, so it is narrower than a t interval would be. CI method says which, and "
        "records before schema 10 with fewer repeats have none. A ratio of two rows (vs "
        "fastest, scaling eff., vs 1-dev, same threads, vs representative, the sharded trade) "
        "that one compare sweep ran both of (the records' sweep id) is taken round by round: "
        "each round's ratio, their geometric mean and Student's t over the rounds both "
        "completed ok, so drift that moves a whole round cancels (paired t); a sweep that "
        "stopped when its answers were clear (--until-ci) gives the sequential rule's wider "
        "interval, at its level per look. Rows of no common sweep, or fewer than 3 common "
        "rounds, have the interval of the two log-scale half-widths added in quadrature "
        "(unpaired: t or bootstrap). The headline's ratio method says which; two rows tie when "
        "their ratio's interval holds 1.",
        f"cv % = sample standard deviation (ddof 1) / mean of {speed} over the ok repeats, x 100 "
        "(it needs 2 ok repeats). noisy names why a cell's speed is not to be trusted: cv (cv % "
        f"> {NOISY_CV_PERCENT:g}) and/or load (other processes used more than "
        f"{BUSY_LOAD_PER_CORE:g} x cores on average during a run, measured as their CPU time; "
        "where a record has no such measure, its 1-minute load average at the start decides); "
        "no otherwise. A record without a load reading (schema v1) counts as unknown, never as "
        "noisy.",
        f"Scaling efficiency = {speed} at N devices / (N x {speed} at 1 device), where the "
        "1-device reference is the framework's single backend, else the same backend at 1 "
        "device, in the same spec only. shared cores: where the N devices of a run are CPU "
        "devices of one machine, they share its cores (this many), so N devices cannot beat one "
        "process given all their threads and the efficiency reads low by design; vs single same "
        f"threads = {speed} / that of the framework's single backend run with as many threads "
        "per worker as the N devices had together (threads per worker x processes), the fair "
        "reference there (empty where no such run is in the records).",
        "time to target s (Accuracy and memory): the median over repeats of the time to "
        "--target (from schema 12: from the first touch of training data to the end of the "
        "evaluation that reached it, evaluations included, as the Time to target table; before, "
        "the sum of step times until --target-accuracy); a repeat that never reached it counts "
        "as infinitely slow.",
        "Peak memory: host RSS per process (rank) and allocator peak per device; the lists are "
        "medians over repeats position by position, so an imbalance (DataParallel's device 0) "
        "shows.",
        f"Modes ({', '.join(MODE_COLUMNS)}) are part of a row's key: two modes never share a "
        "row, and the 1-device reference of a scaling efficiency has the same modes except "
        f"{', '.join(m.column for m in MODES.values() if not m.matters_on_one_device)}. A mode "
        "column that is the same in every row of a table is left out of it and named in the "
        "table's note.",
        "TFLOP/s = the model FLOPs of one step, from the spec (matrix products and attention, 2 "
        "per multiply-add, training = 3 x forward; norms, activations, the loss and the "
        "optimizer left out), / the median step time, all devices together and per device. "
        "util. % = TFLOP/s (the whole run's) / the dense matmul peak of every core or device "
        "the run used, as 'parbench peak' measured it on the run's machine with the same "
        "framework, version and compute dtype: on CPUs one process's peak at all the threads "
        "the run's workers on a node had together, times the nodes (so one process driving 2 "
        "replicas with 2 threads and 2 processes of 1 thread share a denominator); on GPUs one "
        "device's peak times the devices; empty where none was measured, and for records "
        "before schema 11, whose utilisation was per device against one worker's peak. MFU % = "
        "TFLOP/s per device over the GPU's datasheet dense peak (empty on CPUs and unknown "
        "GPUs). CPU ms/step per rank = each rank's user + system CPU time per steady step "
        "(every thread of its process), the ranks' mean; CPU busy % = that over threads per "
        "worker x the wall step time: about 100 is every thread busy, far below is waiting "
        "(a collective, a starved core), far above is threads beyond those asked for.",
        "data wait % = the time steps waited for their batch (taking it from the arrays or the "
        "framework's loader) as a share of that wait plus the step times, all ranks together; a "
        "loader that cannot keep up shows here rather than in the step time."]


def methods(groups: list[Group]) -> list[str]:
    runs = [r for g in groups for row in g.rows for r in row.runs]
    unknown = sum(r["env"].get("load_1m_start") is None for r in runs)
    load = [f"{unknown} of {len(runs)} run(s) carry no load reading: their load is unknown."]
    nodes = [NODES_NOTE] if any(row.nodes > 1 for g in groups for row in g.rows) else []
    tasks = list(dict.fromkeys(g.task for g in groups))
    speed = " / ".join(throughput_column(task) for task in tasks)
    return [*notes(speed), *(task.quality_note for task in tasks), *nodes,
            *(load if unknown else [])]
