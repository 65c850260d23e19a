"""Finalize workers: module-level functions over (task, progress queue) -> small receipt.

- `partition_worker` (redimension step 1): reads a contiguous range of flat batches,
  fills a buffer of at most ``budget`` bytes, groups it by (owning shard, chunk) and
  writes it as a spill run: ``RUN.rec`` (records), ``RUN.idx`` (their record indices,
  int64) and ``RUN.dir.npy`` (shard, crow, ccol, start, count of each group).
- `build_worker` (redimension step 2): owns shards s with s mod W == w; for each, merges
  the spill runs chunk by chunk in key order (windows of whole chunks within the budget),
  sorts cells row-major, applies the duplicates policy, encodes each chunk piece once and
  appends it in key order to the shard's new table; writes its index rows to a file.
- `merge_worker` (compaction): rewrites groups of small batches as single batches into
  the shards it owns.

This module is preloaded by the forkserver: keep its imports light.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

import numpy as np
import xxhash

from .layouts import Layout
from .serializers import get_serializer
from .stores.base import StoreSpec
from .workers import _die_with_parent, _parent_alive, batch_key

GROUP_BYTES = 64 << 20
#: bytes per buffered record beyond the record itself (index, sort keys, temporaries)
PART_OVERHEAD = 8 + 8 + 8 * 5
BUILD_OVERHEAD = 8 + 8 * 6
_DIR_DTYPE = np.dtype([("shard", "<i8"), ("crow", "<i8"), ("ccol", "<i8"), ("start", "<i8"),
                       ("count", "<i8")])
_TAKE_SLICE = 1 << 18


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _void(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype((np.void, a.dtype.itemsize)))


def _min_max(view: np.ndarray, fields: list[str], block: int = 8192) -> tuple[list, list]:
    """Per-field min and max of a structured array, in cache-sized blocks (one pass over memory)."""
    n = len(view)
    if n <= block:
        return [view[f].min() for f in fields], [view[f].max() for f in fields]
    mins, maxs = [], []
    for i in range(0, n, block):
        b = view[i:i + block]
        mins.append([b[f].min() for f in fields])
        maxs.append([b[f].max() for f in fields])
    lo = [min(col) for col in zip(*mins)]
    hi = [max(col) for col in zip(*maxs)]
    return lo, hi


# --- step 1: partition ------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionTask:
    store: StoreSpec
    worker: int
    layout: dict
    format: str
    compression: str
    batches: tuple  # ((seq, shard, first, count), ...) in record order
    dims: tuple
    chunks: tuple
    nshards: int
    spill_dir: str
    budget: int
    main_pid: int = 0


def partition_worker(task: PartitionTask, progress_q) -> dict:
    from .redimension import ValueReader, chunk_shard

    t0 = time.perf_counter()
    _die_with_parent(task.main_pid)
    layout = Layout.from_dict(task.layout)
    ser = get_serializer(task.format, layout, task.compression)
    rs = layout.record_size
    total = sum(b[3] for b in task.batches)
    cap = max(1, min(task.budget // (rs + PART_OVERHEAD), total or 1))
    buf = np.empty(cap, layout.dtype)
    ridx = np.empty(cap, np.int64)
    scratch = np.empty(min(cap, _TAKE_SLICE), layout.dtype)
    d0, d1 = task.dims
    l0, l1 = task.chunks
    k = task.nshards
    runs: list[tuple[str, int]] = []
    timings = {"read_s": 0.0, "sort_s": 0.0, "spill_s": 0.0}
    small_coords = all(layout.field(d).size <= 4 for d in task.dims)

    def flush(n: int) -> None:
        t = time.perf_counter()
        r = buf[d0][:n].astype(np.int64)
        c = buf[d1][:n].astype(np.int64)
        crow = np.floor_divide(r, l0)
        ccol = np.floor_divide(c, l1)
        del r, c
        if k == 1:
            shard = np.zeros(n, np.int64)
        elif small_coords:  # |crow|, |ccol| < 2**62: the sum cannot overflow
            sm = np.add(crow, ccol)
            shard = sm - np.floor_divide(sm, k) * k  # = sm mod k; floor_divide by a scalar is fast
        else:
            shard = chunk_shard(crow, ccol, k)
        crmin, crmax = int(crow.min()), int(crow.max())
        ccmin, ccmax = int(ccol.min()), int(ccol.max())
        nr, nc = crmax - crmin + 1, ccmax - ccmin + 1
        groups = k * nr * nc
        if groups < 2**63:
            g = (shard * nr + (crow - crmin)) * nc + (ccol - ccmin)
            if groups <= 1 << 16:
                g16 = g.astype(np.uint16)
                order = np.argsort(g16, kind="stable")  # radix sort
                counts = np.bincount(g16, minlength=groups)
                nz = np.flatnonzero(counts)
                cnt = counts[nz]
                gk = nz.astype(np.int64)
            else:
                order = np.argsort(g, kind="stable")
                gs = g[order]
                starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
                gk = gs[starts]
                cnt = np.diff(np.r_[starts, n])
            gsh = gk // (nr * nc)
            rem = gk % (nr * nc)
            gcr = rem // nc + crmin
            gcc = rem % nc + ccmin
        else:  # a domain too wide for one 63-bit group number
            order = np.lexsort((ccol, crow, shard))
            s_, r_, c_ = shard[order], crow[order], ccol[order]
            starts = np.flatnonzero(np.r_[True, (s_[1:] != s_[:-1]) | (r_[1:] != r_[:-1]) | (c_[1:] != c_[:-1])])
            gsh, gcr, gcc = s_[starts], r_[starts], c_[starts]
            cnt = np.diff(np.r_[starts, n])
        timings["sort_s"] += time.perf_counter() - t
        t = time.perf_counter()
        name = f"run-{task.worker:03d}-{len(runs):05d}"
        base = os.path.join(task.spill_dir, name)
        src = _void(buf)
        with open(base + ".rec", "wb") as f:
            for i in range(0, n, len(scratch)):
                part = order[i:i + len(scratch)]
                out = _void(scratch[:len(part)])
                np.take(src, part, out=out, mode="clip")
                f.write(memoryview(out).cast("B"))
        with open(base + ".idx", "wb") as f:
            f.write(memoryview(ridx[:n][order]).cast("B"))
        d = np.empty(len(cnt), _DIR_DTYPE)
        d["shard"], d["crow"], d["ccol"], d["count"] = gsh, gcr, gcc, cnt
        d["start"] = np.cumsum(cnt) - cnt
        np.save(base + ".dir.npy", d)
        runs.append((name, n))
        timings["spill_s"] += time.perf_counter() - t

    stores = {}
    fill = 0
    try:
        for seq, shard, first, count in task.batches:
            t = time.perf_counter()
            st = stores.get(shard)
            if st is None:
                st = stores[shard] = task.store.open_shard(shard, write=False)
            with ValueReader(st, "batches") as rd:
                v = rd.get(batch_key(seq))
                if v is None:
                    from .errors import VerifyError

                    raise VerifyError(f"batch {seq} is missing from shard {shard}; run `bulkload verify`")
                _, recs = ser.decode(v)
                pos = 0
                while pos < count:
                    m = min(cap - fill, count - pos)
                    _void(buf)[fill:fill + m] = _void(recs[pos:pos + m]) if recs.flags.c_contiguous else recs[pos:pos + m]
                    ridx[fill:fill + m] = np.arange(first + pos, first + pos + m)
                    fill += m
                    pos += m
                    if fill == cap:
                        timings["read_s"] += time.perf_counter() - t
                        flush(fill)
                        t = time.perf_counter()
                        fill = 0
            timings["read_s"] += time.perf_counter() - t
            progress_q.put(count)
        if fill:
            flush(fill)
    finally:
        for st in stores.values():
            st.close()
    return {"worker": task.worker, "pid": os.getpid(), "runs": runs, "records": total,
            "seconds": round(time.perf_counter() - t0, 4),
            **{k2: round(v, 4) for k2, v in timings.items()}, "max_rss": _rss()}


# --- step 2: build chunks ---------------------------------------------------------------------


@dataclass(frozen=True)
class BuildTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    cell_layout: dict
    format: str
    compression: str
    dims: tuple
    chunks: tuple
    policy: str
    array: str
    table: str
    keep_tables: tuple
    runs: tuple  # ((name, records), ...) in record-index order
    spill_dir: str
    budget: int
    max_piece: int
    main_pid: int = 0

    def owned_shards(self) -> list[int]:
        return [s for s in range(self.nshards) if s % self.workers == self.worker]


def build_worker(task: BuildTask, progress_q) -> dict:
    from .redimension import TABLE_PREFIX, chunk_key, hash_sum, index_columns

    t0 = time.perf_counter()
    _die_with_parent(task.main_pid)
    layout = Layout.from_dict(task.layout)
    cell = Layout.from_dict(task.cell_layout)
    cser = get_serializer(task.format, cell, task.compression)
    rs = layout.record_size
    crs = cell.record_size
    keep = task.policy == "keep"
    d0, d1 = task.dims
    l0, l1 = task.chunks
    cap = max(1, task.budget // (rs + BUILD_OVERHEAD))
    idt = np.dtype(index_columns(cell))
    fields = cell.names
    framed = task.format == "capnp" and cell.framable
    small_coords = all(layout.field(d).size <= 4 for d in task.dims)
    timings = {"read_s": 0.0, "sort_s": 0.0, "encode_s": 0.0, "write_s": 0.0, "sync_s": 0.0}
    stats = {"cells": 0, "dropped": 0, "dropped_hash": 0, "pieces": 0, "chunks": 0}
    index_rows: list[tuple] = []

    dirs = [np.load(os.path.join(task.spill_dir, f"{name}.dir.npy")) for name, _ in task.runs]
    fds: dict[int, tuple[int, int]] = {}

    def run_fds(ri: int) -> tuple[int, int]:
        if ri not in fds:
            base = os.path.join(task.spill_dir, task.runs[ri][0])
            fds[ri] = (os.open(base + ".rec", os.O_RDONLY), os.open(base + ".idx", os.O_RDONLY))
        return fds[ri]

    win = np.empty(0, layout.dtype)
    wridx = np.empty(0, np.int64)

    def pread_into(fd: int, mv: memoryview, offset: int) -> None:
        got = 0
        while got < len(mv):
            n = os.preadv(fd, [mv[got:]], offset + got)
            if n <= 0:
                raise OSError(f"spill run ended early at byte {offset + got}")
            got += n

    try:
        for s in task.owned_shards():
            # size the LMDB map for what this shard will receive (no growth steps on the way)
            incoming = sum(int(d["count"][d["shard"] == s].sum()) for d in dirs) * crs
            path = task.store.shard_path(s)
            existing = os.path.getsize(os.path.join(path, "data.mdb")) if os.path.exists(
                os.path.join(path, "data.mdb")) else 0
            opts = dict(task.store.options)
            if task.store.scheme in ("lmdb", "mem"):
                opts["map_size"] = str(existing + int(incoming * 1.3) + (64 << 20))
            st = task.store.backend.open(path, write=True, options=opts)
            try:
                for t_name in st.tables():  # leftovers of crashed or replaced builds
                    if t_name.startswith(TABLE_PREFIX) and t_name not in task.keep_tables:
                        st.drop_table(t_name)
                st.drop_table(task.table)
                # this shard's groups in every run, in run (= record index) order
                ent_run, ent_crow, ent_ccol, ent_start, ent_count = [], [], [], [], []
                for ri, d in enumerate(dirs):
                    sel = d[d["shard"] == s]
                    if len(sel):
                        ent_run.append(np.full(len(sel), ri, np.int64))
                        ent_crow.append(sel["crow"])
                        ent_ccol.append(sel["ccol"])
                        ent_start.append(sel["start"])
                        ent_count.append(sel["count"])
                if not ent_run:
                    continue
                e_run = np.concatenate(ent_run)
                e_crow = np.concatenate(ent_crow)
                e_ccol = np.concatenate(ent_ccol)
                e_start = np.concatenate(ent_start)
                e_count = np.concatenate(ent_count)
                o = np.lexsort((e_ccol, e_crow))
                newk = np.r_[True, (e_crow[o][1:] != e_crow[o][:-1]) | (e_ccol[o][1:] != e_ccol[o][:-1])]
                uid_sorted = np.cumsum(newk) - 1
                e_uid = np.empty(len(o), np.int64)
                e_uid[o] = uid_sorted
                u_crow = e_crow[o][newk]
                u_ccol = e_ccol[o][newk]
                nu = len(u_crow)
                totals = np.bincount(e_uid, weights=e_count, minlength=nu).astype(np.int64)
                cum = np.cumsum(totals)
                group: list[tuple[bytes, object]] = []
                group_bytes = 0

                def flush_group():
                    nonlocal group, group_bytes
                    if group:
                        t = time.perf_counter()
                        st.put_sorted(group, table=task.table)
                        timings["write_s"] += time.perf_counter() - t
                        group, group_bytes = [], 0

                a = 0
                while a < nu:
                    base_cum = cum[a - 1] if a else 0
                    b = int(np.searchsorted(cum, base_cum + cap, side="right"))
                    b = max(b, a + 1)
                    n = int(cum[b - 1] - base_cum)
                    # --- read the window: each run's groups for chunks [a, b) are contiguous
                    t = time.perf_counter()
                    if len(win) < n:
                        win = np.empty(max(n, min(cap, 2 * len(win))), layout.dtype)
                        wridx = np.empty(len(win), np.int64)
                    sel = np.flatnonzero((e_uid >= a) & (e_uid < b))
                    wu = np.repeat(e_uid[sel], e_count[sel])
                    pos = 0
                    wmv = memoryview(_void(win)).cast("B")
                    imv = memoryview(wridx).cast("B")
                    for ri in np.unique(e_run[sel]):
                        rsel = sel[e_run[sel] == ri]
                        lo = int(e_start[rsel].min())
                        cnt = int((e_start[rsel] + e_count[rsel]).max()) - lo
                        fr, fi = run_fds(int(ri))
                        pread_into(fr, wmv[pos * rs:(pos + cnt) * rs], lo * rs)
                        pread_into(fi, imv[pos * 8:(pos + cnt) * 8], lo * 8)
                        pos += cnt
                    assert pos == n, (pos, n)
                    timings["read_s"] += time.perf_counter() - t
                    t = time.perf_counter()
                    w = win[:n]
                    ridx = wridx[:n]
                    r = w[d0].astype(np.int64)
                    c = w[d1].astype(np.int64)
                    if small_coords:  # no overflow: x - floor(x / L) * L, much faster than np.mod
                        rin = r - np.floor_divide(r, l0) * l0
                        cin = c - np.floor_divide(c, l1) * l1
                    else:
                        rin = np.mod(r, l0)
                        cin = np.mod(c, l1)
                    span = (b - a) * l0 * l1
                    if span < 2**64:
                        key = ((wu - a).astype(np.uint64) * np.uint64(l0) + rin.astype(np.uint64)) \
                            * np.uint64(l1) + cin.astype(np.uint64)
                        order = np.argsort(key)
                        sk = key[order]
                        dup = sk[1:] == sk[:-1]
                        if dup.any():  # duplicates: record-index order within each cell
                            order = np.lexsort((ridx, key))
                            sk = key[order]
                            dup = sk[1:] == sk[:-1]
                    else:
                        order = np.lexsort((ridx, cin, rin, wu))
                        su, sr, sc = wu[order], rin[order], cin[order]
                        dup = (su[1:] == su[:-1]) & (sr[1:] == sr[:-1]) & (sc[1:] == sc[:-1])
                    syn = None
                    if dup.any():
                        if task.policy == "error":
                            i = int(np.flatnonzero(dup)[0])
                            a_idx, b_idx = int(ridx[order[i]]), int(ridx[order[i + 1]])
                            from .errors import DuplicateCellError

                            raise DuplicateCellError(
                                f"cell ({d0}={int(r[order[i]])}, {d1}={int(c[order[i]])}) of array "
                                f"{task.array!r} is set by records {a_idx} and {b_idx}; nothing was committed - "
                                f"choose --duplicates first, last or keep, or fix the data")
                        if keep:
                            nn = len(order)
                            starts = np.r_[True, ~dup]
                            pos_ = np.arange(nn)
                            syn = (pos_ - np.maximum.accumulate(np.where(starts, pos_, 0))).astype(np.uint32)
                        else:
                            keepm = np.ones(len(order), bool)
                            if task.policy == "first":
                                keepm[1:][dup] = False
                            else:
                                keepm[:-1][dup] = False
                            dropped = order[~keepm]
                            stats["dropped"] += len(dropped)
                            stats["dropped_hash"] = (stats["dropped_hash"] + hash_sum(
                                np.ascontiguousarray(w[dropped]))) % 2**64
                            order = order[keepm]
                    elif keep:
                        syn = np.zeros(len(order), np.uint32)
                    su = wu[order]
                    bnd = np.flatnonzero(su[1:] != su[:-1]) + 1
                    cstarts = np.r_[0, bnd]
                    cends = np.r_[bnd, len(order)]
                    timings["sort_s"] += time.perf_counter() - t
                    t = time.perf_counter()
                    src = _void(w)
                    src8 = w.view(np.uint8).reshape(n, rs) if keep else None
                    for cs, ce in zip(cstarts.tolist(), cends.tolist()):
                        u = int(su[cs])
                        crow, ccol = int(u_crow[u]), int(u_ccol[u])
                        stats["chunks"] += 1
                        for piece, ps in enumerate(range(cs, ce, task.max_piece)):
                            pe = min(ps + task.max_piece, ce)
                            m = pe - ps
                            idx = order[ps:pe]
                            if framed:  # no zero-fill: every byte is written below
                                buf, view = cser.new_buffer(m, into=np.empty(cser.message_size(m), np.uint8))
                            else:
                                buf, view = cser.new_buffer(m)
                            if keep:
                                vb = view.view(np.uint8).reshape(m, crs)
                                vb[:, :rs] = src8[idx]
                                view["syn"] = syn[ps:pe]
                            else:
                                np.take(src, idx, out=_void(view), mode="clip")
                            mins, maxs = _min_max(view, fields)
                            value = cser.encode_buffer(buf, view, 0)
                            nbytes = len(memoryview(value).cast("B")) if not isinstance(value, bytes) else len(value)
                            checksum = xxhash.xxh3_64_intdigest(value)
                            row = [crow, ccol, piece, s, m, nbytes, checksum]
                            for mn, mx in zip(mins, maxs):
                                row.append(mn)
                                row.append(mx)
                            index_rows.append(tuple(row))
                            group.append((chunk_key(crow, ccol, piece), value))
                            group_bytes += nbytes
                            stats["pieces"] += 1
                            stats["cells"] += m
                            if group_bytes >= GROUP_BYTES:
                                timings["encode_s"] += time.perf_counter() - t
                                flush_group()
                                t = time.perf_counter()
                    timings["encode_s"] += time.perf_counter() - t
                    progress_q.put(n)
                    if not _parent_alive(task.main_pid):
                        raise SystemExit("coordinator died")
                    a = b
                flush_group()
                t = time.perf_counter()
                st.sync()
                timings["sync_s"] += time.perf_counter() - t
            finally:
                st.close()
    finally:
        for fr, fi in fds.values():
            os.close(fr)
            os.close(fi)
    path = None
    if index_rows:
        path = os.path.join(task.spill_dir, f"index-{task.worker:03d}.npy")
        np.save(path, np.array(index_rows, dtype=idt))
    return {"worker": task.worker, "pid": os.getpid(), "index": path, **stats,
            "seconds": round(time.perf_counter() - t0, 4),
            **{k2: round(v, 4) for k2, v in timings.items()}, "max_rss": _rss()}


# --- compaction: merge small batches --------------------------------------------------------------


@dataclass(frozen=True)
class MergeTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    format: str
    compression: str
    # ((new_seq, first, count, ((old_seq, old_shard, old_count), ...)), ...) in new_seq order
    plan: tuple
    main_pid: int = 0

    def owned_shards(self) -> list[int]:
        return [s for s in range(self.nshards) if s % self.workers == self.worker]


def merge_worker(task: MergeTask, progress_q) -> dict:
    from .redimension import ValueReader

    t0 = time.perf_counter()
    _die_with_parent(task.main_pid)
    layout = Layout.from_dict(task.layout)
    ser = get_serializer(task.format, layout, task.compression)
    owned = task.owned_shards()
    writers = {}
    readers = {}
    rows = []
    try:
        for s in owned:  # writers first: a later reader of the same shard shares the env
            writers[s] = task.store.open_shard(s, write=True)
        first_new = min((p[0] for p in task.plan), default=None)
        for s, st in writers.items():
            if first_new is not None:
                st.delete_range(batch_key(first_new), None)  # leftovers of a crashed attempt

        def shard(i):
            if i in writers:
                return writers[i]
            if i not in readers:
                readers[i] = task.store.open_shard(i, write=False)
            return readers[i]

        groups: dict[int, list] = {s: [] for s in owned}
        group_bytes = {s: 0 for s in owned}

        def flush(s):
            if groups[s]:
                writers[s].put_sorted(groups[s], table="batches")
                groups[s], group_bytes[s] = [], 0

        for new_seq, first, count, olds in task.plan:
            s = new_seq % task.nshards
            if s not in writers:
                continue
            if len(olds) == 1:
                oseq, oshard, _ = olds[0]
                v = shard(oshard).get(batch_key(oseq))
                value = bytes(v)
            else:
                buf, recs = ser.new_buffer(count)
                pos = 0
                for oseq, oshard, ocount in olds:
                    with ValueReader(shard(oshard), "batches") as rd:
                        _, part = ser.decode(rd.get(batch_key(oseq)))
                        recs[pos:pos + ocount] = part
                    pos += ocount
                value = ser.encode_buffer(buf, recs, first)
                value = value if isinstance(value, bytes) else bytes(memoryview(value).cast("B"))
            rows.append([new_seq, s, first, count, xxhash.xxh3_64_intdigest(value), len(value)])
            groups[s].append((batch_key(new_seq), value))
            group_bytes[s] += len(value)
            if group_bytes[s] >= GROUP_BYTES:
                flush(s)
            progress_q.put(count)
        for s in owned:
            flush(s)
            writers[s].sync()
    finally:
        for st in list(readers.values()) + list(writers.values()):
            st.close()
    return {"worker": task.worker, "batches": rows, "seconds": round(time.perf_counter() - t0, 4),
            "max_rss": _rss()}
