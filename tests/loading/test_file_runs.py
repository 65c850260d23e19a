"""The extent a `load FILE` run loads (loading/file_runs.py), against a model of the file's
history: any sequence of loads, crashes, appends, rewrites and truncations of a real file.

The model compares bytes; the code compares fingerprints (files under 1 MiB are hashed
whole, so both must agree)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.errors import ChangedInputError
from loader.loading.file_runs import changed_while_loading, plan_file_run
from loader.model import manifest as mf
from loader.model.layouts import get_layout
from loader.model.runs import Run, new_run
from loader.sources import FileSource

LAYOUT = get_layout("scidb96")
RS = LAYOUT.record_size

actions = st.one_of(
    st.tuples(st.just("load")),
    st.tuples(st.just("crash")),  # a run starts and dies before its commit
    st.tuples(st.just("append"), st.integers(1, 40)),
    st.tuples(st.just("rewrite"), st.integers(0, 200)),  # one record (if the file has it)
    st.tuples(st.just("truncate"), st.integers(0, 200)),
)


@dataclass
class Model:
    """The file's bytes and the runs of the dataset, each with the bytes it planned."""

    path: str
    data: bytearray = field(default_factory=bytearray)
    runs: list[tuple[Run, bytes]] = field(default_factory=list)
    counter: int = 0

    @property
    def n(self) -> int:
        return len(self.data) // RS

    def write(self) -> None:
        with open(self.path, "wb") as f:
            f.write(self.data)

    def new_records(self, k: int) -> bytes:
        self.counter += 1
        return bytes((self.counter * 7 + i) % 251 for i in range(k * RS))

    def expected(self) -> tuple[str, int, int] | None:
        """(status, offset, count) of the next run, None: refused (the file changed)."""
        if not self.runs:
            return "new", 0, self.n
        done = next(((r, b) for r, b in reversed(self.runs) if r.status == "done"), None)
        last, planned = self.runs[-1]
        end = last.source_offset + last.total
        if last.status == "interrupted" and end <= self.n and bytes(self.data[: end * RS]) == planned:
            return "resume", last.source_offset, last.total
        if done is None:
            return "new", 0, self.n
        run, planned = done
        end = run.source_offset + run.total
        if end > self.n or bytes(self.data[: end * RS]) != planned:
            return None
        return ("already-loaded", end, 0) if end == self.n else ("appended", end, self.n - end)

    def record(self, status: str, offset: int, count: int, fingerprint: str) -> None:
        run = new_run("load", source=self.path, fingerprint=fingerprint)
        run.update(status=status, source_offset=offset, total=count, resumable=True)
        self.runs.append((run, bytes(self.data[: (offset + count) * RS])))


def plan(model: Model, new_run: bool = False):
    m = mf.Manifest(
        layout=LAYOUT.to_dict(),
        format="capnp",
        compression="none",
        scheme="lmdb",
        shards=1,
        batch_records=10,
        runs=[r for r, _ in model.runs],
    )
    return plan_file_run(
        m, FileSource(model.path), LAYOUT, new_run=new_run, considered=lambda r: True, resumable=lambda r: True
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(0, 30), steps=st.lists(actions, max_size=12))
def test_the_extent_of_each_run_follows_the_files_history(tmp_path, first, steps):
    model = Model(str(tmp_path / "f.bin"))
    model.data += model.new_records(first)
    model.write()
    src = FileSource(model.path)
    for step in [("load",), *steps]:
        if step[0] in ("load", "crash"):
            want = model.expected()
            if want is None:
                with pytest.raises(ChangedInputError, match=r"changed since run .* use --new-run"):
                    plan(model)
                got = plan(model, new_run=True)  # what the message says to do
                want = ("new", 0, model.n)
            else:
                got = plan(model)
            assert (got.status, got.offset, got.count) == want
            assert got.fingerprint == src.fingerprint(LAYOUT, got.end)
            if got.status == "resume":
                model.runs.pop()  # the resumed run is the same run
            if got.status != "already-loaded":
                model.record("done" if step[0] == "load" else "interrupted", got.offset, got.count, got.fingerprint)
                assert changed_while_loading(src, LAYOUT, got.fingerprint, got.end) is None
        elif step[0] == "append":
            model.data += model.new_records(step[1])
        elif step[0] == "rewrite" and step[1] < model.n:
            model.data[step[1] * RS] ^= 0xFF
        elif step[0] == "truncate" and step[1] < model.n:
            del model.data[step[1] * RS :]
        model.write()


def test_a_file_changed_while_it_is_loaded_is_named(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(96)) * 50)
    src = FileSource(str(path))
    fp = src.fingerprint(LAYOUT, 50)
    with open(path, "ab") as f:
        f.write(bytes(96 * 5))  # appended beyond the extent loaded: still the same records
    assert changed_while_loading(src, LAYOUT, fp, 50) is None
    with open(path, "r+b") as f:
        f.seek(96 * 3)
        f.write(b"x")
    msg = changed_while_loading(src, LAYOUT, fp, 50)
    assert msg == (
        f"{path} changed while it was being loaded (its first 50 records are not the ones the run started with)"
    )
    os.unlink(path)
    assert "changed while it was being loaded" in changed_while_loading(src, LAYOUT, fp, 50)
