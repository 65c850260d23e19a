"""A dataset directory whose manifest is missing or unreadable is damaged, never new.

With ``manifest.json`` deleted, a dangling link, a FIFO, a link to /dev/null, empty,
truncated JSON or a directory, while ``shard-*`` and ``arrays`` hold data, every command
names the damage (exit 1, one line saying how to recover) and writes nothing: the shards
and the array index stay byte-identical. Each command runs with a timeout, so that a FIFO
that makes one wait fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import run_cli

from tests.system import damaged_datasets
from tests.system.damaged_datasets import digest

DAMAGES = {
    "deleted": lambda p: None,
    "dangling-link": lambda p: os.symlink(str(p) + ".gone", p),
    "fifo": lambda p: os.mkfifo(p),
    "dev-null-link": lambda p: os.symlink("/dev/null", p),
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(b'{"version":1,"layout":{"na'),
    "directory": lambda p: p.mkdir(),
}

finalized = damaged_datasets.finalized  # the fixture


def _commands(uri: str, tmp: Path) -> dict[str, list]:
    incoming = tmp / "incoming"
    incoming.mkdir()
    (incoming / "a.bin").write_bytes(b"\0" * 96 * 10)
    pipeline = tmp / "job.toml"
    pipeline.write_text(f'[job]\ndataset = "{uri}"\nlayout = "scidb96"\n\n[load]\nsource = "gen://scidb96?n=10"\n')
    return {
        "info": ["info", uri],
        "verify": ["verify", uri],
        "export": ["export", uri, "--out", tmp / "out.bin"],
        "query": ["query", uri, "--box", "i0=0:2,i1=0:10"],
        "get": ["get", uri, "1"],
        "load": ["load", "gen://scidb96?n=10", uri],
        "ingest": ["ingest", uri, "--from", incoming, "--layout", "scidb96"],
        "finalize": ["finalize", uri, "--dims", "i0:10,i1:1000"],
        "compact": ["compact", uri],
        "run": ["run", pipeline],
    }


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_every_command_names_a_dataset_without_readable_manifest_and_writes_nothing(
    finalized, tmp_path, scheme, damage
):
    root = tmp_path / "ds"
    shutil.copytree(finalized[scheme], root)
    manifest = root / "manifest.json"
    manifest.unlink()
    DAMAGES[damage](manifest)
    before = digest(root)
    assert any(k.startswith("shard-") for k in before) and any(k.startswith("arrays") for k in before)
    uri = f"{scheme}://{root}"
    for name, args in _commands(uri, tmp_path).items():
        r = run_cli(*args, timeout=30)
        line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        assert r.returncode == 1, (name, r.returncode, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, (name, r.stderr)
        assert "manifest.json" in line and "backup" in line, (name, line)
        assert "load one first" not in r.stderr, (name, r.stderr)
        assert digest(root) == before, name
    assert not (tmp_path / "out.bin").exists()

    import loader
    from loader.errors import DamagedDatasetError

    with pytest.raises(DamagedDatasetError, match=re.escape("manifest.json")):
        loader.open(uri)
    assert digest(root) == before


def test_an_empty_directory_is_still_a_new_dataset(tmp_path):
    """The check does not refuse what is not damage: an empty directory (or one holding
    only unrelated files) is loaded into as a new dataset."""
    root = tmp_path / "ds"
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    r = run_cli("info", f"lmdb://{root}")
    assert r.returncode == 2 and "load one first" in r.stderr
    run_cli("load", "gen://scidb96?n=10", f"lmdb://{root}", "-q", check=True)
    assert (root / "notes.txt").read_text() == "mine"


def test_replace_rebuilds_a_dataset_whose_manifest_is_gone(finalized, tmp_path):
    """The recovery the message names: `--replace` builds the dataset anew (discarding
    the shards without a manifest)."""
    root = tmp_path / "ds"
    shutil.copytree(finalized["lmdb"], root)
    (root / "manifest.json").unlink()
    run_cli("load", "gen://scidb96?n=10", f"lmdb://{root}", "--replace", "-q", check=True)
    r = run_cli("info", f"lmdb://{root}", "--json", check=True)
    assert json.loads(r.stdout)["records"] == 10
