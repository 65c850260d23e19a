"""Typed runs and garbage entries (model/runs.py, model/garbage_entry.py) against the format
main's code wrote before they were typed.

The golden files in fixtures/runs/ were made by main's code (commit 1c2a27c) running the
scenarios of run_scenarios.py (see make_run_fixtures.py): 22 manifests holding every kind
of run (load: file, appended, killed, resumed, stdin, bad input, dead worker, superseded,
--replace; ingest: done, skip, fail, killed, resumed; finalize: done, failed, rebuilt;
compact; documents: load, bad files, ingest, killed, resumed, fold) and the three kinds
of garbage entries, with what `bulkload info --json` printed of them (edited since, as
the commands changed on purpose: the idle compaction runs cc08580d8181 and 14d37aa1bc6b taken out - a
compaction with nothing to do records no run -, and `info` shows the runs before a
--replace as ``replaced``). These tests prove:

- decoding a manifest gives typed runs and entries, and encoding it gives the very bytes
  main's code wrote (and a save changes nothing but the generation);
- today's commands write runs and entries with the same keys, in the same order, with the
  same JSON types as main's code did, on the same paths;
- `bulkload info --json` prints the same runs and garbage as main's code;
- keys and garbage kinds of a newer version are kept as they are (never collected);
- a value of the wrong type in any field of a run, a plan file or an entry is a one-line
  manifest error naming the run (its id) or entry and the field: exit 1, nothing written;
- runs are one type per kind: `Run` has only the fields every kind has, a kind's own field
  is absent on the other kinds (at runtime, and for a type checker).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import manifest_json, run_cli, write_manifest_json
from helpers.typecheck import mypy_lines

import loader
from loader.errors import ManifestError
from loader.model import manifest as mf
from loader.model.garbage_entry import ENTRY_CLASSES
from loader.model.runs import RUN_CLASSES, CompactRun, FinalizeRun, IngestRun, LoadRun, PlanFile, Run, new_run

from .run_scenarios import run_all

FIXTURES = Path(__file__).parent / "fixtures" / "runs"
NAMES = sorted(p.name.removesuffix(".manifest.json") for p in FIXTURES.glob("*.manifest.json"))


def golden(name: str) -> bytes:
    return (FIXTURES / f"{name}.manifest.json").read_bytes()


def encoded(m: mf.Manifest) -> bytes:
    return json.dumps(m.to_json(), separators=(",", ":")).encode()  # as write_json_atomic writes it


def read(path: Path) -> mf.Manifest:
    with open(path, "rb") as f:
        return mf.read_manifest(f)


def place(tmp_path: Path, data: bytes) -> tuple[Path, str]:
    """A dataset directory holding this manifest (no shards); its URI."""
    root = tmp_path / "ds"
    root.mkdir()
    (root / "manifest.json").write_bytes(data)
    return root, f"{json.loads(data)['scheme']}://{root}"


def shape(value):
    """What must not change of a JSON value: keys in order and JSON types (the first item
    of a list of objects; other lists only as lists - their length depends on timing)."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return ["list", shape(value[0])] if value and isinstance(value[0], dict) else "list"
    return type(value).__name__


def run_shape(run: dict):
    return [run["kind"], run["status"], shape(run)]


def test_the_fixtures_hold_every_kind_of_run_and_entry():
    runs = [r for n in NAMES for r in json.loads(golden(n))["runs"]]
    seen = {(r["kind"], r["status"]) for r in runs}
    assert seen >= {("load", s) for s in ("done", "failed", "running", "superseded")}
    assert seen >= {("ingest", s) for s in ("done", "failed", "running")} | {("finalize", "failed")}
    assert {
        "attempts",
        "replace",
        "plan",
        "skipped",
        "table",
        "source_offset",
        "superseded_by",
        "shards_folded",
        "strategy",
        "deferred",
    } <= {k for r in runs for k in r}
    kinds = {g["kind"] for n in NAMES for g in json.loads(golden(n))["garbage"]}
    assert kinds == {"batches", "array", "doc-tables"}


@pytest.mark.parametrize("name", NAMES)
def test_main_manifests_decode_typed_and_encode_to_the_same_bytes(name, tmp_path):
    data = golden(name)
    root, _ = place(tmp_path, data)
    m = read(root / "manifest.json")
    assert all(type(r) is RUN_CLASSES[r.kind] for r in m.runs)
    assert all(type(g) is ENTRY_CLASSES[g.kind] for g in m.garbage)
    assert all(type(e) is PlanFile for r in m.runs if isinstance(r, IngestRun) for e in r.plan or [])
    raw = json.loads(data)
    assert [(r.id, r.kind, r.status, r.error, r.records) for r in m.runs] == [
        (r["id"], r["kind"], r["status"], r.get("error"), r.get("records")) for r in raw["runs"]
    ]
    assert encoded(m) == data
    m.save(root)  # the real writer (into the catalog): the same JSON but for the generation and version
    raw["generation"] += 1
    raw["version"] = mf.VERSION
    assert encoded(mf.load_manifest(root)) == json.dumps(raw, separators=(",", ":")).encode()


@pytest.mark.parametrize("name", NAMES)
def test_info_json_prints_the_runs_and_garbage_main_printed(name, tmp_path):
    _, uri = place(tmp_path, golden(name))
    p = run_cli("info", uri, "--json")  # exit 1: the shards are not there (not what is compared)
    got = json.loads(p.stdout)
    want = json.loads((FIXTURES / f"{name}.info.json").read_text())
    assert {"runs": got["runs"], "garbage": got["garbage"]} == want
    assert [list(r) for r in got["runs"]] == [list(r) for r in want["runs"]]  # key order too


@pytest.fixture(scope="module")
def written_now(tmp_path_factory) -> dict[str, bytes]:
    """The manifests today's code leaves at the moments the golden files were taken."""
    out = {}

    def snap(name: str, uri: str) -> None:
        out[name] = json.dumps(manifest_json(Path(uri.split("://", 1)[1]))).encode()

    run_all(tmp_path_factory.mktemp("now"), snap)
    return out


def test_commands_write_runs_and_entries_as_main_did(written_now):
    assert sorted(written_now) == NAMES
    for name in NAMES:
        now, then = json.loads(written_now[name]), json.loads(golden(name))
        assert [run_shape(r) for r in now["runs"]] == [run_shape(r) for r in then["runs"]], name
        assert [shape(g) for g in now["garbage"]] == [shape(g) for g in then["garbage"]], name
        assert list(now) == list(then), name


# --- what a newer version wrote ---------------------------------------------------------------


def test_keys_and_garbage_kinds_of_a_newer_version_stay_where_they_are(tmp_path):
    """A run's unknown keys are written back in place; an entry of an unknown kind stays
    listed and is not collected (main's collector crashed on one: KeyError)."""
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=300", uri, shards=2, workers=2, batch_records=100)
    root = tmp_path / "ds"
    m = manifest_json(root)
    run = m["runs"][0]
    m["runs"][0] = {**dict(list(run.items())[:5]), "future": {"x": [1]}, **dict(list(run.items())[5:])}
    future_entry = {"kind": "future-thing", "where": [1, 2], "generation": 1}
    m["garbage"] = [future_entry, {"kind": "batches", "below": 0, "note": "n", "generation": 1}]
    write_manifest_json(root, m)
    p = run_cli("load", "gen://scidb96?n=100&start=300", uri, "-q")
    assert p.returncode == 0, p.stderr
    after = manifest_json(root)
    assert list(after["runs"][0].items()) == list(m["runs"][0].items())
    assert after["garbage"] == [future_entry]  # the known entry was collected, the other kept
    assert mf.load_manifest(root).runs[0].future == {"x": [1]}
    with loader.open(uri) as ds:
        assert ds.records == 400 and ds.verify().ok


def test_fields_are_typed_and_keep_the_order_they_were_set():
    run = new_run("load", source="x")
    assert type(run) is LoadRun
    assert list(run.to_dict())[:8] == ["id", "kind", "status", "started", "ended", "host", "pid", "source"]
    run.records = 3
    run.error = None
    run.status = "done"  # set again: stays in its place
    assert list(run.to_dict())[-2:] == ["records", "error"] and run.to_dict()["status"] == "done"
    assert run.pending is None and not run.has("pending")  # absent reads as None
    run.pending = [[0, 0, 0, 1, 2, 3]]
    run.drop("pending")
    assert "pending" not in run.to_dict()
    with pytest.raises(AttributeError, match="no field 'stauts'"):
        run.stauts = "done"  # a typo never becomes a key on disk
    copy = run.copy()
    copy.status = "interrupted"
    assert run.status == "done" and Run.from_dict(run.to_dict()) == run


# --- wrong types ------------------------------------------------------------------------------

WRONG = {"bad": 1}  # an object: the wrong type for every field


def corrupt(data: bytes, where: str, field: str, kind: str) -> tuple[bytes, str]:
    """The manifest with ``field`` of a run of ``kind`` (``where`` = runs), of a run's first
    plan file (plan) or of a garbage entry of ``kind`` (garbage) set to WRONG; the label
    the error must give."""
    m = json.loads(data)
    if where == "garbage":
        i = next(j for j, g in enumerate(m["garbage"]) if g["kind"] == kind)
        m["garbage"][i][field] = WRONG
        return json.dumps(m).encode(), f"garbage entry #{i}"
    i = max(j for j, r in enumerate(m["runs"]) if r["kind"] == ("ingest" if where == "plan" else kind))
    run = m["runs"][i]
    (run["plan"][0] if where == "plan" else run)[field] = WRONG
    return json.dumps(m).encode(), f"run {run['id'] if field != 'id' else f'#{i}'}"


#: a manifest holding a run (entry) of each kind
GOLDEN_OF = {"load": "load-resumed", "ingest": "ingest-resumed", "finalize": "finalize-compact-garbage"}
GOLDEN_OF |= {"compact": "finalize-compact-garbage", "batches": "finalize-compact-garbage"}
GOLDEN_OF |= {"array": "finalize-compact-garbage", "doc-tables": "docs-compact-garbage"}
CASES = (
    [("runs", f, kind) for kind, cls in RUN_CLASSES.items() for f in cls._fields]
    + [("plan", f, "ingest") for f in PlanFile._fields]
    + [("garbage", f, kind) for kind, cls in ENTRY_CLASSES.items() for f in cls._fields]
)


@pytest.mark.parametrize("where,field,kind", CASES)
def test_a_wrong_type_in_any_field_names_the_run_and_the_field(where, field, kind, tmp_path):
    data, label = corrupt(golden(GOLDEN_OF[kind]), where, field, kind)
    root, _ = place(tmp_path, data)
    with pytest.raises(ManifestError) as e:
        read(root / "manifest.json")
    msg = str(e.value)
    name = f"plan[0].{field}" if where == "plan" else field
    assert label in msg and f"field `{name}`: Expected" in msg and "\n" not in msg, msg
    assert "got `object`" in msg and "is not a valid bulkload manifest" in msg


@pytest.mark.parametrize(
    "command",
    [
        ["info", "{uri}", "--json"],
        ["verify", "{uri}"],
        ["load", "gen://scidb96?n=10", "{uri}", "-q"],
        ["compact", "{uri}"],
    ],
)
@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("records", "12", "field `records`: Expected `int`, got `str`"),
        ("ended", "late", "field `ended`: Expected `float | null`, got `str`"),
        ("pending", [{}], "field `pending[0]`: Expected `array`, got `object`"),
        ("status", None, "field `status`: Expected `str`, got `null`"),
    ],
)
def test_the_cli_exits_1_with_one_line_and_writes_nothing(tmp_path, command, field, value, expected):
    data = golden("load-resumed")
    m = json.loads(data)
    m["runs"][1][field] = value
    root, uri = place(tmp_path, json.dumps(m).encode())
    shutil.copytree(root, tmp_path / "before")
    p = run_cli(*[a.format(uri=uri) for a in command])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("bulkload: error: "), p.stderr
    assert f"run {m['runs'][1]['id']} (load), {expected}" in lines[0], lines[0]
    assert (root / "manifest.json").read_bytes() == (tmp_path / "before" / "manifest.json").read_bytes()


def test_a_run_of_a_kind_this_version_does_not_know_is_kept_as_it_is(tmp_path):
    """Runs decode as a tagged union of one type per kind; a newer version's kind is a
    plain `Run`, validated for the fields every kind shares, and written back unchanged."""
    m = json.loads(golden("load-resumed"))
    m["runs"].append({**m["runs"][0], "kind": "future", "id": "f1", "future": [1]})
    data = json.dumps(m, separators=(",", ":")).encode()
    root, _ = place(tmp_path, data)
    got = read(root / "manifest.json")
    assert [type(r) for r in got.runs] == [LoadRun, LoadRun, LoadRun, Run]
    assert encoded(got) == data
    m["runs"][-1]["records"] = "12"
    (tmp_path / "bad").mkdir()
    root2, _ = place(tmp_path / "bad", json.dumps(m).encode())
    with pytest.raises(ManifestError, match=r"run f1 \(future\), field `records`: Expected `int`"):
        read(root2 / "manifest.json")


# --- one type per kind ------------------------------------------------------------------------

#: fields of one kind (or of load and ingest runs) that the other kinds' classes must not have
NOT_ON = {
    LoadRun: ("directory", "plan", "deferred", "strategy", "cells", "target_batch_records", "shards_folded"),
    IngestRun: ("replace", "replaces", "inputs", "source_offset", "strategy", "batches_before"),
    FinalizeRun: ("source", "fingerprint", "pending", "resumable", "first_seq", "plan", "replace", "table"),
    CompactRun: ("source", "pending", "resumable", "attempts", "workers", "strategy", "plan", "inputs"),
    Run: ("source", "pending", "replace", "plan", "strategy", "target_batch_records", "table", "workers"),
}


def test_run_declares_only_the_fields_every_kind_has():
    common = {"id", "kind", "status", "started", "ended", "host", "pid", "error", "as_of", "records", "seconds"}
    assert set(Run._fields) == common
    assert all(set(cls._fields) > common for cls in RUN_CLASSES.values())


@pytest.mark.parametrize("cls", list(NOT_ON), ids=lambda c: c.__name__)
def test_a_kind_specific_field_is_absent_on_the_other_kinds_at_runtime(cls):
    run = cls(id="r1", kind=cls._tag or "future", status="done")
    for name in NOT_ON[cls]:
        assert name not in cls._fields and not hasattr(run, name), name
        with pytest.raises(AttributeError, match=f"no field '{name}'"):
            setattr(run, name, None)


def test_decoded_runs_have_only_their_kinds_fields(tmp_path):
    root, _ = place(tmp_path, golden("finalize-compact-garbage"))
    m = read(root / "manifest.json")
    by_kind = {r.kind: r for r in m.runs}
    assert by_kind["load"].source is not None and by_kind["finalize"].strategy is not None
    assert not hasattr(by_kind["finalize"], "source") and not hasattr(by_kind["compact"], "pending")
    assert not hasattr(by_kind["load"], "strategy")


TYPED_SNIPPET = """\
from loader.model.runs import CompactRun, FinalizeRun, IngestRun, LoadRun, Run, SourceRun

FinalizeRun(id="f", kind="finalize", status="done").source
CompactRun(id="c", kind="compact", status="done").pending
LoadRun(id="l", kind="load", status="done").strategy
IngestRun(id="i", kind="ingest", status="done").replace


def read(run: Run) -> None:
    run.first_seq
    if isinstance(run, SourceRun):
        reveal_type(run.source)
    if isinstance(run, LoadRun):
        reveal_type(run.replace)
    if isinstance(run, IngestRun):
        reveal_type(run.plan)
    if isinstance(run, FinalizeRun):
        reveal_type(run.strategy)
"""


def test_a_type_checker_refuses_a_field_of_another_kind(tmp_path):
    lines = mypy_lines(TYPED_SNIPPET, tmp_path)
    assert lines == [
        '3: error: "FinalizeRun" has no attribute "source"  [attr-defined]',
        '4: error: "CompactRun" has no attribute "pending"  [attr-defined]',
        '5: error: "LoadRun" has no attribute "strategy"  [attr-defined]',
        '6: error: "IngestRun" has no attribute "replace"  [attr-defined]',
        '10: error: "Run" has no attribute "first_seq"  [attr-defined]',
        '12: note: Revealed type is "str | None"',
        '14: note: Revealed type is "bool | None"',
        '16: note: Revealed type is "list[loader.model.runs.PlanFile] | None"',
        '18: note: Revealed type is "str | None"',
    ]
