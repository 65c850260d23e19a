"""`bulkload verify` for 2-D arrays: every stored piece against the chunk index, and every
array against the flat records it was built from.

Per piece: present, size and xxh3 checksum as indexed, decodable, cell count as indexed,
cells inside their chunk and in strict row-major order (``syn`` = 0..k-1 for keep).
Per array (only when its pieces are sound): the multiset of cells (without ``syn``) plus
the records dropped by first/last equals the flat records it was built from
(order-independent checksum, hashes.py, and counts).

The flat records are read once, by the pass that checks the batches (read/dataset.py
`Dataset.verify_part`): it feeds each batch's records, or what reading them raised, to a
`FlatSums`, which keeps the hash sum every array needs (its records below
``built_from_records``) - however many arrays there are.

The work splits by shard: `array_parts(ds, shards, flat)` checks the pieces stored in
those shards and takes the sums of their cells and (from ``flat``) of the flat records of
the batches the pass read - the sums are order-independent, so parts computed apart (one
task per shard on an executor, api/verify_tasks.py) add up to the whole;
`combine_arrays(manifest, parts)` turns the parts, in shard order, into the problems
(array, chunk, shard, problem) - exactly the rows one part of all shards gives. Reads
only, through one snapshot.
"""

from __future__ import annotations

import numpy as np
import xxhash

from ..errors import BulkloadError, VerifyError
from ..infra.checksums import CHANGED
from ..model.chunk_index import index_path, read_index
from ..model.layouts import Layout
from ..serializers import Serializer, get_serializer
from ..stores.values import ValueReader
from .chunks import chunk_key
from .hashes import hash_sum
from .records import coordinates


class FlatSums:
    """The hash sums of the flat records each array was built from (those below its
    ``built_from_records``), of the batches one pass reads, in record order: `add` gives a
    batch's records, `damaged` what reading them raised instead - an array that needs that
    batch then gets that error in place of its sum (as `_decode` would raise it)."""

    def __init__(self, arrays: dict):
        self.sums = {int(a["built_from_records"]): 0 for a in arrays.values()}
        self.errors: dict[int, BaseException] = {}

    def needs(self, first: int) -> bool:
        """Whether some array still needs the records of the batch from record ``first``."""
        return any(first < built and built not in self.errors for built in self.sums)

    def add(self, first: int, recs: np.ndarray) -> None:
        whole = None  # the hash sum of the whole batch, shared by the arrays that need all of it
        for built, total in self.sums.items():
            if first >= built or built in self.errors:
                continue
            if built - first >= len(recs):
                whole = hash_sum(np.ascontiguousarray(recs)) if whole is None else whole
                part = whole
            else:
                part = hash_sum(np.ascontiguousarray(recs[: built - first]))
            self.sums[built] = (total + part) % 2**64

    def damaged(self, first: int, error: BaseException) -> None:
        for built in self.sums:
            if first < built:
                self.errors.setdefault(built, error)

    def of(self, built: int) -> tuple[int, BaseException | None]:
        """(hash sum, None), or (0, the first error reading the records it needs)."""
        error = self.errors.get(built)
        return (0, error) if error is not None else (self.sums[built], None)


def array_parts(ds, shards, flat: FlatSums) -> dict[str, dict]:
    """Array name -> what ``shards`` contribute to its check: ``index_error`` (the chunk
    index is unreadable), ``problems`` (its pieces in these shards, in shard order),
    ``cells`` / ``hsum`` (count and hash sum of their cells), ``flat`` (hash sum of the
    flat records it was built from, of the batches the pass that fed ``flat`` read) or
    ``flat_error`` (reading them failed: raised only if the whole-array check needs the sum)."""
    wanted = set(shards)
    return {
        name: _ArrayCheck(ds, name, summary).part(wanted, flat) for name, summary in sorted(ds.manifest.arrays.items())
    }


def combine_arrays(manifest, parts: list[dict[str, dict]]) -> list[dict]:
    """The problems of every array from its parts (given in shard order)."""
    problems: list[dict] = []
    for name, summary in sorted(manifest.arrays.items()):
        mine = [p[name] for p in parts]
        index_error = next((m["index_error"] for m in mine if m["index_error"]), None)
        if index_error is not None:
            problems.append(_row(name, index_error))
            continue
        found = [row for m in mine for row in m["problems"]]
        if found:  # else the multiset check would only repeat them
            problems.extend(found)
            continue
        problem = _multiset_problem(name, summary, manifest.records, mine)
        if problem is not None:
            problems.append(_row(name, problem))
    return problems


def _multiset_problem(name: str, a: dict, records: int, mine: list[dict]) -> str | None:
    """Cells + dropped duplicates == the flat records the array was built from."""
    built = int(a["built_from_records"])
    if built > records:
        return f"built from {built} records but the dataset holds {records}"
    for m in mine:
        if isinstance(m["flat_error"], VerifyError):  # a damaged batch: the batch rows name it
            return "not compared with the flat records it was built from: some of them are damaged"
        if m["flat_error"] is not None:
            raise m["flat_error"]
    cells = sum(m["cells"] for m in mine)
    dropped = int(a.get("dropped", 0))
    if cells + dropped != built:
        return f"holds {cells} cells (+{dropped} dropped duplicates), built from {built} records"
    hsum = sum(m["hsum"] for m in mine) % 2**64
    flat = sum(m["flat"] for m in mine) % 2**64
    if (hsum + int(a.get("dropped_hash", 0))) % 2**64 != flat:
        return (
            "the multiset of cells does not match the flat records it was built from "
            "(order-independent checksum differs)"
        )
    return None


def _row(name: str, problem: str, chunk="-", shard="-") -> dict:
    return {
        "array": name,
        "chunk": chunk,
        "shard": shard,
        "batch": "-",
        "first_record": "-",
        "problem": f"array {name!r}: {problem}",
    }


class _ArrayCheck:
    """The checks of one array over some of its shards (see `array_parts`)."""

    def __init__(self, ds, name: str, summary: dict):
        self.ds, self.name, self.a = ds, name, summary
        self.cell: Layout | None = None  # once the index is read
        self.ser: Serializer | None = None
        self.sizes = (0, 0)  # (cell, flat record) sizes in bytes, once the index is read
        (self.d0, self.l0), (self.d1, self.l1) = [(d["name"], d["chunk"]) for d in summary["dims"]]
        self.keep = summary["policy"] == "keep"
        self.problems: list[dict] = []
        self.cells = 0
        self.hsum = 0

    def bad(self, problem: str, chunk="-", shard="-") -> None:
        self.problems.append(_row(self.name, problem, chunk, shard))

    def part(self, shards: set[int], flat: FlatSums) -> dict:
        out: dict[str, object] = {
            "index_error": None,
            "problems": self.problems,
            "cells": 0,
            "hsum": 0,
            "flat": 0,
            "flat_error": None,
        }
        try:
            idx = read_index(index_path(self.ds.spec.root, self.a))
        except BulkloadError as e:
            return out | {"index_error": str(e)}
        self.cell = Layout.from_dict(self.a["cell_layout"])
        self.sizes = (self.cell.record_size, self.ds.layout.record_size)  # a sum over the fields: once
        self.ser = ser = get_serializer(self.a["format"], self.cell, self.a["compression"])
        by_shard: dict[int, list[int]] = {}
        for i in range(len(idx["crow"])):
            by_shard.setdefault(int(idx["shard"][i]), []).append(i)
        for s, rows in sorted(by_shard.items()):
            if s not in shards:
                continue
            try:
                st = self.ds.shard(s)
            except BulkloadError as e:
                self.bad(f"shard {s}: {e}", shard=s)
                continue
            for i in rows:
                self._check_piece(st, s, idx, i, ser)
        out.update(cells=self.cells, hsum=self.hsum)
        if not self.problems:  # raised by combine_arrays if the check needs it
            out["flat"], out["flat_error"] = flat.of(int(self.a["built_from_records"]))
        return out

    def _check_piece(self, st, s: int, idx: dict, i: int, ser: Serializer) -> None:
        crow, ccol, piece = int(idx["crow"][i]), int(idx["ccol"][i]), int(idx["piece"][i])
        where = f"({crow},{ccol},{piece})"
        with ValueReader(st, self.a["table"]) as rd:  # the cells are checked in place, while it is open
            v = rd.get(chunk_key(crow, ccol, piece))
            problem = self._value_problem(v, where, s, idx, i)
            if problem is None and v is not None:  # (a missing value is a problem)
                try:
                    _, cells = ser.decode(v)
                    cells = np.ascontiguousarray(cells)
                except Exception as e:
                    problem = f"chunk {where}: undecodable: {e}"
                else:
                    problem = self._cells_problem(cells, where, (crow, ccol, piece), int(idx["cells"][i]))
                    problem = problem or self._sample_problem(cells, where, idx, i)
            if problem is not None:
                self.bad(problem, where, s)
                return
            self.cells += len(cells)
            cell_size, record_size = self.sizes
            raw = cells.view(np.uint8).reshape(len(cells), cell_size)[:, :record_size]
            self.hsum = (self.hsum + hash_sum(np.ascontiguousarray(raw))) % 2**64

    @staticmethod
    def _value_problem(v, where: str, s: int, idx: dict, i: int) -> str | None:
        if v is None:
            return f"chunk {where} is missing from shard {s}"
        if len(v) != int(idx["nbytes"][i]):
            return f"chunk {where}: size {len(v)} != {int(idx['nbytes'][i])} in the index"
        if xxhash.xxh3_64_intdigest(v) != int(idx["checksum"][i]):
            return f"chunk {where}: {CHANGED}"
        return None

    def _cells_problem(self, cells: np.ndarray, where: str, key: tuple, indexed: int) -> str | None:
        crow, ccol, piece = key
        if len(cells) != indexed:
            return f"chunk {where}: holds {len(cells)} cells, the index says {indexed}"
        r = cells[self.d0].astype(np.int64)
        c = cells[self.d1].astype(np.int64)
        if len(cells) and (np.any(np.floor_divide(r, self.l0) != crow) or np.any(np.floor_divide(c, self.l1) != ccol)):
            return f"chunk {where}: holds cells outside the chunk"
        if len(cells) > 1 and not self._row_major(cells, r, c):
            return f"chunk {where}: cells are not in strict row-major order"
        if self.keep and piece == 0 and len(cells) and cells["syn"][0] != 0:
            return f"chunk {where}: syn does not start at 0"
        return None

    def _sample_problem(self, cells: np.ndarray, where: str, idx: dict, i: int) -> str | None:
        """The piece's sample in the index (chunk_index.py) must be its cells' coordinates
        at 0, K, 2K, ...: random-read box queries find the box's cells by it."""
        if "sample_off" not in idx:
            return None  # an index written before samples existed
        every = int(idx["sample_every"][i])
        lo, hi = int(idx["sample_off"][i]), int(idx["sample_off"][i + 1])
        if every < 1 or not (
            np.array_equal(idx["sample_r"][lo:hi], coordinates(cells[self.d0][::every]))
            and np.array_equal(idx["sample_c"][lo:hi], coordinates(cells[self.d1][::every]))
        ):
            return f"chunk {where}: its sample in the index does not match its cells"
        return None

    def _row_major(self, cells: np.ndarray, r: np.ndarray, c: np.ndarray) -> bool:
        dr, dc = np.diff(r), np.diff(c)
        newcell = (dr > 0) | ((dr == 0) & (dc > 0))
        if not self.keep:
            return bool(np.all(newcell))
        syn = cells["syn"].astype(np.int64)
        same = (dr == 0) & (dc == 0)
        return bool(np.all(np.where(same, np.diff(syn) == 1, newcell & (syn[1:] == 0))))
