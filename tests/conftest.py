"""Fixtures shared by the tests (helpers: the `helpers` package beside this file)."""

import os
import shutil
import uuid

import pytest
from hypothesis import settings

# CI runs the property tests with a fixed seed so that a run is reproducible; a failure
# prints the example (and a blob to replay it with @reproduce_failure).
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(params=["lmdb", "rocksdb", "mem"])
def store_uri(request, tmp_path):
    """A fresh dataset URI for each backend; mem:// datasets are removed afterwards."""
    scheme = request.param
    if scheme == "mem":
        name = f"test-{uuid.uuid4().hex[:10]}"
        yield f"mem://{name}"
        shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)
    else:
        yield f"{scheme}://{tmp_path}/ds"


@pytest.fixture
def lmdb_uri(tmp_path):
    return f"lmdb://{tmp_path}/ds"
