"""`bulkload run PIPELINE.toml`: the shipped pipelines, precedence, and file errors."""

import json
from pathlib import Path

import pytest
from conftest import run_cli

import loader
from loader.api.pipeline import parse
from loader.errors import PipelineError
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
REPO = Path(__file__).resolve().parents[2]


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


def test_shipped_scidb_pipeline_runs_small(tmp_path):
    pytest.importorskip("loader.arrays.finalize")
    out = tmp_path / "box.csv"
    p = run_cli(
        "run",
        REPO / "pipelines" / "scidb.toml",
        "--set",
        "load.source=gen://scidb96?n=30000",
        "--set",
        f"job.dataset=lmdb://{tmp_path}/ds",
        "--set",
        "finalize.dims=i0:10,i1:1000",
        "--set",
        "query.box=i0=0:5,i1=0:1000",
        "--set",
        f"query.out={out}",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert [s["step"] for s in rep["steps"]] == ["load", "finalize", "query"]
    assert rep["steps"][0]["report"]["records"] == 30000
    assert rep["steps"][2]["report"]["rows"] > 0 and out.exists()
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 30000) and "grid" in ds.manifest.arrays
    # again: the load step finds its run finished and loads nothing
    p = run_cli(
        "run",
        REPO / "pipelines" / "scidb.toml",
        "--set",
        "load.source=gen://scidb96?n=30000",
        "--set",
        f"job.dataset=lmdb://{tmp_path}/ds",
        "--set",
        "finalize.dims=i0:10,i1:1000",
        "--set",
        "query.box=i0=0:5,i1=0:1000",
        "--set",
        f"query.out={out}",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["steps"][0]["report"]["status"] == "already-loaded"


def test_shipped_ingest_pipeline_with_env_and_set(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.bin").write_bytes(gen_bytes(0, 300))
    (d / "b.bin").write_bytes(gen_bytes(300, 200))
    env = {"BULKLOAD_INGEST_FROM": str(d), "BULKLOAD_DATASET": f"lmdb://{tmp_path}/ds", "BULKLOAD_BATCH_RECORDS": "100"}
    p = run_cli("--log-format", "json", "run", REPO / "pipelines" / "ingest.toml", env=env)
    assert p.returncode == 0, p.stderr
    events = [json.loads(ln) for ln in p.stderr.splitlines() if ln.startswith("{")]
    assert any(e.get("step") == "ingest" for e in events) and events[-1]["msg"].startswith("pipeline ingest: done")
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 500) and ds.manifest.batch_records == 100
    # --set beats the environment: another dataset
    p = run_cli(
        "run",
        REPO / "pipelines" / "ingest.toml",
        "--set",
        f"dataset=lmdb://{tmp_path}/ds2",
        "--set",
        "compact.enabled=true",
        "--json",
        env=env,
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["dataset"] == f"lmdb://{tmp_path}/ds2" and [s["step"] for s in rep["steps"]] == ["ingest", "compact"]


def test_precedence_set_over_env_over_file_over_defaults(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('dataset = "lmdb://file"\nshards = 3\n[load]\nsource = "gen://scidb96?n=5"\n')
    p = parse(
        str(f),
        ["job.shards=5"],
        env={"BULKLOAD_SHARDS": "4", "BULKLOAD_JOB_WORKERS": "2", "BULKLOAD_DATASET": "lmdb://env"},
    )
    job = p.config["job"]
    assert (job["shards"], job["workers"], job["dataset"], job["batch_records"]) == (5, 2, "lmdb://env", None)
    assert (
        p.origin["job.shards"] == "--set job.shards"
        and p.origin["job.dataset"] == "environment variable BULKLOAD_DATASET"
    )
    assert p.config["load"]["new_run"] is False and p.steps == ["load"]
    # environment variables only touch sections the file has
    p = parse(str(f), [], env={"BULKLOAD_QUERY_BOX": "i0=0:1"})
    assert "query" not in p.config


@pytest.mark.parametrize(
    "text,message",
    [
        (
            '[job]\ndataset = "lmdb://x"\nshards = 2\nshard = 3\n[load]\nsource = "-"\n',
            "p.toml, line 4: unknown key 'shard' in [job]; known keys: dataset, layout",
        ),
        (
            '[job]\ndataset = "lmdb://x"\n\n[load]\nsource = "-"\nnew_run = "yes"\n',
            "p.toml, line 6: key 'new_run' in [load] must be true or false, not 'yes'",
        ),
        (
            '[job]\ndataset = "lmdb://x"\nshards = "two"\n[load]\nsource = "-"\n',
            "p.toml, line 3: key 'shards' in [job] must be an integer, not 'two'",
        ),
        (
            '[job]\ndataset = "lmdb://x"\n[load]\nsource = "-"\n[finalise]\ndims = "i0:1,i1:1"\n',
            "p.toml, line 5: unknown section [finalise]; known sections: job, load, ingest",
        ),
        (
            '[job]\ndataset = "lmdb://x"\n[load]\nsource = "-"\n[ingest]\nfrom = "in"\n',
            "needs exactly one of [load] (source = ...) or [ingest] (from = ...); it has both",
        ),
        ('[job]\ndataset = "lmdb://x"\n[load]\nnew_run = true\n', "p.toml, line 3: [load] needs the key 'source'"),
        ("[job]\ndataset = lmdb://x\n", "p.toml: not valid TOML: "),
        ('[job]\nshards = 2\n[load]\nsource = "-"\n', "p.toml, line 1: [job] needs the key 'dataset'"),
    ],
)
def test_pipeline_file_errors_name_the_key_and_line(tmp_path, text, message):
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(PipelineError) as e:
        parse(str(f), [], env={})
    assert message in str(e.value)
    p = run_cli("run", f, env={k: "" for k in ()})
    assert p.returncode == 2 and p.stderr.startswith("bulkload: error: ") and message in p.stderr


def test_a_pipeline_file_that_is_not_utf8_is_a_usage_error(tmp_path):
    f = tmp_path / "p.toml"
    f.write_bytes(b'[job]\ndataset = "lmdb://x\xfe"\n[load]\nsource = "-"\n')
    with pytest.raises(PipelineError, match="p.toml: not valid TOML: byte 0xfe at byte offset 25 is not UTF-8"):
        parse(str(f), [], env={})
    p = run_cli("run", f)
    assert p.returncode == 2 and "byte 0xfe at byte offset 25 is not UTF-8" in p.stderr, p.stderr


def test_set_and_env_errors(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('dataset = "lmdb://x"\n[load]\nsource = "-"\n')
    with pytest.raises(PipelineError, match=r"--set 'load.sorce=x': unknown key 'sorce' in \[load\]"):
        parse(str(f), ["load.sorce=x"], env={})
    with pytest.raises(PipelineError, match="--set 'shards': use --set section.key=value"):
        parse(str(f), ["shards"], env={})
    with pytest.raises(
        PipelineError, match=r"environment variable BULKLOAD_WORKERS: key 'workers' in \[job\] must be an integer"
    ):
        parse(str(f), [], env={"BULKLOAD_WORKERS": "many"})
    p = run_cli("run", tmp_path / "missing.toml")
    assert p.returncode == 2 and "pipeline file" in p.stderr and "does not exist" in p.stderr


def test_a_failing_step_names_the_step_and_exits_with_its_code(tmp_path):
    f = tmp_path / "p.toml"
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"x" * 100)
    f.write_text(f'dataset = "lmdb://{tmp_path}/ds"\n[load]\nsource = "{bad}"\n')
    p = run_cli("run", f)
    assert p.returncode == 1
    assert "bulkload: error: pipeline p, step load: " in p.stderr and "partial record at byte offset 96" in p.stderr


def test_every_finalize_option_of_the_api_is_a_pipeline_key(tmp_path):
    """[finalize] force and strategy (made from loader.finalize's signature) reach the step:
    an up-to-date array is rebuilt with force = true, left alone without it."""
    f = tmp_path / "p.toml"
    text = (
        f'dataset = "lmdb://{tmp_path}/ds"\nshards = 1\nworkers = 1\n[load]\nsource = "gen://scidb96?n=2000"\n'
        '[finalize]\ndims = "i0:10,i1:1000"\nstrategy = "spill"\n'
    )
    f.write_text(text)
    first = loader.run(str(f), progress="none")
    assert first.steps[1]["report"]["status"] == "done"
    again = loader.run(str(f), progress="none")
    assert again.steps[1]["report"]["status"] == "nothing-to-do"
    forced = loader.run(str(f), ["finalize.force=true"], progress="none")
    assert forced.steps[1]["report"]["status"] == "done" and forced.steps[1]["report"]["cells"] == 2000
    with pytest.raises(PipelineError, match=r"\[finalize\] strategy = 'sideways'"):
        loader.run(str(f), ["finalize.strategy=sideways"], progress="none")
