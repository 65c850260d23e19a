"""The public Python API (loader/api): one function per command, keyword options named as
the CLI's, a typed report with to_dict() that is what --json prints."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from helpers import run_cli
from typer.main import get_command

import loader
from loader import api
from loader.arrays.report import FinalizeReport
from loader.cli.main import app
from loader.loading.report import LoadReport
from loader.maintain.report import CompactReport
from loader.read.export import ExportReport
from loader.read.verifying import VerifyReport

#: CLI command -> API function; CLI parameters that are presentation only
COMMANDS = {
    "load": "load",
    "ingest": "ingest",
    "finalize": "finalize",
    "compact": "compact",
    "verify": "verify",
    "export": "export",
    "query": "query",
    "info": "info",
    "run": "run",
}
PRESENTATION = {"json_out", "quiet"}
#: CLI parameter names that differ from the API's (a negated flag, a Python keyword, a plural)
RENAMED = {"no_compact": "compact", "set_": "sets", "pipeline": "path"}


def test_every_public_name_resolves_and_import_stays_light():
    code = (
        "import sys, loader; heavy = [m for m in ('pyarrow', 'lmdb', 'capnp', 'rocksdict', 'numpy') "
        "if m in sys.modules]; print(heavy); print(sorted(n for n in loader.__all__ if n != '__version__'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"  # `import loader` imports no stage
    assert out[1] == str(sorted(api.PUBLIC))
    for name in api.PUBLIC:
        assert callable(getattr(loader, name)) and getattr(loader, name) is getattr(api, name)
    with pytest.raises(AttributeError):
        loader.no_such_command  # noqa: B018


def test_version_is_the_installed_distributions_and_read_lazily():
    """loader.__version__ is the installed metadata's version (pyproject.toml's, the one
    source, as `bulkload --version` prints it), read only when asked for."""
    from importlib.metadata import version

    code = "import sys, loader; print('importlib.metadata' in sys.modules); print(loader.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", version("bulkload")]
    assert "__version__" in loader.__all__ and loader.__version__ == version("bulkload")
    # no copy of the version in the code: another installed version is the one it says
    other = "import importlib.metadata as m; m.version = lambda d: '9.8.7'; import loader; print(loader.__version__)"
    assert subprocess.run([sys.executable, "-c", other], capture_output=True, text=True).stdout == "9.8.7\n"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_options_are_the_api_keywords(command):
    cli = get_command(app).commands[command]
    params = inspect.signature(getattr(api, COMMANDS[command])).parameters
    for p in cli.params:
        if p.name in PRESENTATION:
            continue
        name = RENAMED.get(p.name, p.name)
        assert name in params or (p.name == "dataset" and "dataset_uri" in params), (
            f"bulkload {command}: option {p.name} has no keyword {name!r} in loader.{COMMANDS[command]}"
        )


def test_each_command_returns_its_typed_report(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    rep = loader.load("gen://scidb96?n=3000", uri, shards=2, workers=1, batch_records=500)
    assert isinstance(rep, LoadReport) and rep.records == 3000
    fin = loader.finalize(uri, dims="i0:5,i1:1000", workers=1)
    assert isinstance(fin, FinalizeReport) and fin.cells == 3000
    com = loader.compact(uri, target_batch_records=3000)
    assert isinstance(com, CompactReport) and com.batches_after == 1 and com.layout is None
    ver = loader.verify(uri)
    assert isinstance(ver, VerifyReport) and ver.ok and ver.records == 3000
    exp = loader.export(uri, str(tmp_path / "x.arrow"), "arrow")
    assert isinstance(exp, ExportReport) and exp.records == 3000 and exp.bytes > 3000 * 96
    table = loader.query(uri, "i0=0:5,i1=0:100")
    assert table.num_rows == len(loader.query(uri, {"i0": (0, 5), "i1": (0, 100)}))
    info = loader.info(uri)
    assert info["records"] == 3000 and info["problems"] == []
    for r in (rep, fin, com, ver, exp):
        json.dumps(r.to_dict())  # what --json prints


def test_cli_json_is_the_reports_to_dict(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2000", uri, shards=2, workers=1, batch_records=500)
    cli = json.loads(run_cli("verify", uri, "--json").stdout)
    assert cli == loader.verify(uri).to_dict()
    out = tmp_path / "x.npy"
    cli = json.loads(run_cli("export", uri, "--out", out, "--format", "npy", "--json").stdout)
    assert cli == loader.export(uri, str(out), "npy").to_dict()
    cli = json.loads(run_cli("compact", uri, "--json").stdout)
    api_rep = loader.compact(uri).to_dict()
    assert set(cli) == set(api_rep) and cli["records"] == api_rep["records"] == 2000


def test_run_returns_a_pipeline_report(tmp_path):
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        f'[job]\ndataset = "lmdb://{tmp_path}/ds"\nshards = 2\nworkers = 1\n'
        '[load]\nsource = "gen://scidb96?n=1000"\n[compact]\n'
    )
    rep = loader.run(str(pipe), progress="none")
    assert [s["step"] for s in rep.steps] == ["load", "compact"] and rep.dataset.endswith("/ds")
    d = rep.to_dict()
    assert d["steps"][0]["report"]["records"] == 1000 and d["steps"][1]["report"]["records"] == 1000
    bad = run_cli("run", pipe, "--set", "finalize.memory_budget=12q", "--set", "finalize.dims=i0:5,i1:100")
    assert bad.returncode == 2 and "[finalize] memory_budget = '12q': memory_budget '12q' is not a size" in bad.stderr
