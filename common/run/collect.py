"""A multi-node run's rank files travel to global rank 0 through the framework's own collective.

Node 0's parbench writes the record, but the other nodes' ranks wrote their ``rank<r>.json`` and
``samples-rank<r>.npy`` on their own machines, and nodes need not share a file system. So at the
end of training every rank packs its two files into bytes and the ranks all-gather them with the
one collective every strategy has, ``all_reduce_sum`` (each rank fills only its own row of a
ranks x bytes matrix; the sum is everyone's rows). The bytes ride in float64 six to a value
(48 bits, exact below 2**53), so the transfer is 1.33x the files' size. Rank 0 then writes every
rank's files into its own folder, where the harness reads them as for a single-node run.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Protocol

import numpy as np

from parbench.base.files import write_atomic

from .feeds import samples_file

BYTES_PER_VALUE = 6
PLACES = 256 ** np.arange(BYTES_PER_VALUE, dtype=np.int64)


class Collective(Protocol):
    rank: int
    num_processes: int

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray: ...


def pack(blob: bytes) -> np.ndarray:
    """Bytes as float64 values, six bytes each (the last one zero-padded)."""
    padded = np.zeros(-(-len(blob) // BYTES_PER_VALUE) * BYTES_PER_VALUE, dtype=np.int64)
    padded[:len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    return (padded.reshape(-1, BYTES_PER_VALUE) @ PLACES).astype(np.float64)


def unpack(values: np.ndarray, length: int) -> bytes:
    digits = (np.rint(values).astype(np.int64)[:, None] // PLACES) % 256
    return digits.astype(np.uint8).tobytes()[:length]


def all_gather_bytes(collective: Collective, blob: bytes) -> list[bytes]:
    """Every rank's ``blob``, in rank order, on every rank (two all-reduces)."""
    ranks = collective.num_processes
    lengths = np.zeros(ranks)
    lengths[collective.rank] = len(blob)
    lengths = np.rint(collective.all_reduce_sum(lengths)).astype(int)
    width = -(-int(lengths.max()) // BYTES_PER_VALUE)
    rows = np.zeros((ranks, width))
    mine = pack(blob)
    rows[collective.rank, :len(mine)] = mine
    rows = collective.all_reduce_sum(rows.ravel()).reshape(ranks, width)
    return [unpack(row, length) for row, length in zip(rows, lengths)]


def rank_files(rank: int) -> tuple[str, str]:
    return f"rank{rank}.json", samples_file(rank)


def collect_rank_files(folder: Path, collective: Collective) -> None:
    """Call on every rank after writing its own files: rank 0 ends up with every rank's."""
    log_name, samples_name = rank_files(collective.rank)
    buffer = io.BytesIO()
    np.savez(buffer, log=np.frombuffer((folder / log_name).read_bytes(), dtype=np.uint8),
             samples=np.load(folder / samples_name))
    blobs = all_gather_bytes(collective, buffer.getvalue())
    if collective.rank != 0:
        return
    for rank, blob in enumerate(blobs):
        parts = np.load(io.BytesIO(blob))
        log_name, samples_name = rank_files(rank)
        write_atomic(folder / log_name, parts["log"].tobytes())
        samples = io.BytesIO()
        np.save(samples, parts["samples"])
        write_atomic(folder / samples_name, samples.getvalue())
