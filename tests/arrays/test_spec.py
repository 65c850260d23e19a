"""arrays/spec.py: what finalize accepts as an array (name, dims, policy) and the cell layout."""

import pickle

import numpy as np
import pytest
from helpers import run_cli

import loader
from loader.arrays.spec import POLICIES, ArraySpec, cell_layout, check_array_name, make_spec, parse_dims
from loader.errors import UsageError
from loader.model.layouts import Field, Layout, get_layout

SCIDB96 = get_layout("scidb96")
#: every integer type a dimension may have, one float, and a uint64 (refused: coordinates are int64)
WIDE = Layout(
    "wide",
    (
        Field("a8", "int8"),
        Field("u16", "uint16"),
        Field("a32", "int32"),
        Field("b64", "int64"),
        Field("u32", "uint32"),
        Field("f", "float32"),
        Field("big", "uint64"),
    ),
    "test layout",
)


@pytest.mark.parametrize(
    "dims,want",
    [
        ("i0:10,i1:100000", (("i0", "i1"), (10, 100000))),
        (" i3 : 7 , i2:1 ", (("i3", "i2"), (7, 1))),  # spaces around names and lengths
        ([("i1", 1), ("i0", 2**63 - 1)], (("i1", "i0"), (1, 2**63 - 1))),
        ((("i2", "5"), ("i3", 3.0)), (("i2", "i3"), (5, 3))),  # whole numbers in other types
    ],
)
def test_parse_dims_accepts_text_and_pairs(dims, want):
    assert parse_dims(dims, SCIDB96) == want


@pytest.mark.parametrize("a,b", [("a8", "u16"), ("a32", "b64"), ("u32", "a8"), ("big", "a8")])
def test_every_integer_type_is_a_dimension(a, b):
    assert parse_dims(f"{a}:3,{b}:4", WIDE) == ((a, b), (3, 4))


@pytest.mark.parametrize(
    "dims,msg",
    [
        (
            "f:10,a8:5",
            "'f' is float32, not an integer or a time; dimensions must be integer or datetime64/timedelta64 fields (a8, u16, a32, b64, u32, big)",
        ),
        ("a8:2.5,u16:1", "chunk length '2.5' of 'a8' is not an integer"),
        ([("a8", 2.5), ("u16", 1)], "chunk length 2.5 of 'a8' is not an integer"),
        ("a8:9223372036854775808,u16:1", "must be a positive integer below 2**63, got 9223372036854775808"),
        ([("a8", -1), ("u16", 1)], "must be a positive integer below 2**63, got -1"),
        ("a8:1,,u16:1", "'' is not FIELD:CHUNK"),
        ("a8:,u16:1", "'a8:' is not FIELD:CHUNK"),
        (":3,u16:1", "':3' is not FIELD:CHUNK"),
        (42, "give 'FIELD:CHUNK,FIELD:CHUNK' or [(field, chunk), ...]"),
        ([("a8",)], "give 'FIELD:CHUNK,FIELD:CHUNK' or [(field, chunk), ...]"),
        ([("a8", 1)], "exactly two dimensions (got 1)"),
        ("nope:1,a8:1", "unknown field 'nope'; layout 'wide' has a8, u16, a32, b64, u32, f, big"),
    ],
)
def test_parse_dims_errors_name_the_problem(dims, msg):
    with pytest.raises(UsageError) as ei:
        parse_dims(dims, WIDE)
    assert msg in str(ei.value)
    assert "\n" not in str(ei.value)


def test_a_layout_without_integer_fields_says_so():
    floats = Layout("floats", (Field("x", "float64"), Field("y", "float64")), "")
    with pytest.raises(UsageError, match=r"\(none in this layout\)"):
        parse_dims("x:1,y:1", floats)


@pytest.mark.parametrize("name", ["grid", "G", "a_1", "x" * 64])
def test_array_names_allowed(name):
    assert check_array_name(name) == name


@pytest.mark.parametrize("name", ["", "1grid", "_g", "no good", "a-b", "x" * 65, "grid\n", None, 3])
def test_array_names_refused(name):
    with pytest.raises(UsageError, match="is not allowed; use a letter then letters, digits or _"):
        check_array_name(name)


def test_make_spec_checks_name_policy_and_syn_before_dims():
    with pytest.raises(UsageError, match="array name"):
        make_spec(SCIDB96, "nope", "no good", "error")  # the name first
    with pytest.raises(UsageError, match="--duplicates 'often' is unknown; use one of error, first, last, keep"):
        make_spec(SCIDB96, "nope", "grid", "often")
    with_syn = Layout("s", (Field("i", "int32"), Field("j", "int32"), Field("syn", "uint8")), "")
    with pytest.raises(UsageError, match="already has a field named syn; use first or last"):
        make_spec(with_syn, "i:1,j:1", "grid", "keep")
    assert make_spec(with_syn, "i:1,j:1", "grid", "first").policy == "first"


@pytest.mark.parametrize("policy", POLICIES)
def test_spec_and_cell_layout(policy):
    spec = make_spec(SCIDB96, "i1:1000,i0:10", "g", policy)
    assert spec.dims == ("i1", "i0") and spec.chunks == (1000, 10) and spec.dims_text == "i1:1000,i0:10"
    assert spec.attrs == [n for n in SCIDB96.names if n not in ("i0", "i1")]
    assert spec.layout_obj.to_dict() == SCIDB96.to_dict()
    cell = spec.cell_layout()
    if policy == "keep":
        assert cell.names == [*SCIDB96.names, "syn"] and cell.record_size == SCIDB96.record_size + 4
        assert cell.dtype["syn"] == np.dtype("<u4")
    else:
        assert cell.to_dict() == SCIDB96.to_dict()
    assert cell_layout(SCIDB96, policy).to_dict() == cell.to_dict()
    again = pickle.loads(pickle.dumps(spec))  # tasks carry it to worker processes
    assert again == spec and isinstance(again, ArraySpec)


# --- default dims: scidb96's only (issue 28 #19) ---------------------------------------------------


def test_only_scidb96_has_default_dims():
    assert make_spec(SCIDB96, None, "grid", "error").dims_text == "i0:10,i1:100000"
    namesake = Layout("scidb96", (Field("i0", "int64"), Field("i1", "int64")), "a user's layout")
    lookalike = Layout("pairs", (Field("i0", "int64"), Field("i1", "int64"), Field("v", "float64")), "")
    for layout in (WIDE, namesake, lookalike):
        with pytest.raises(UsageError, match=rf"layout '{layout.name}' has no default dims; give --dims"):
            make_spec(layout, None, "grid", "error")


@pytest.mark.parametrize(
    "fields",
    [
        [("i0", "<i8"), ("i1", "<i8"), ("v", "<f8")],  # scidb96's dim names
        [("x", "<i4"), ("y", "<i4"), ("v", "<f8")],
    ],
)
def test_finalize_without_dims_of_another_layout_asks_for_them(tmp_path, fields):
    arr = np.zeros(100, dtype=fields)
    arr[fields[0][0]] = np.arange(100)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(arr, uri, shards=1, workers=1)
    for args in (["finalize", uri], ["run", _pipeline(tmp_path, uri)]):
        p = run_cli(*args)
        assert p.returncode == 2, p.stderr
        assert "has no default dims; give --dims FIELD:CHUNK,FIELD:CHUNK" in p.stderr
        assert f"({fields[0][0]}, {fields[1][0]})" in p.stderr and "Traceback" not in p.stderr
    with loader.open(uri) as ds:
        assert not ds.manifest.arrays
    dims = f"{fields[0][0]}:10,{fields[1][0]}:10"
    assert run_cli("finalize", uri, "--dims", dims).returncode == 0


def _pipeline(tmp_path, uri):
    f = tmp_path / "p.toml"
    f.write_text(
        f'[job]\ndataset = "{uri}"\n[load]\nsource = "gen://scidb96?n=10"\nenabled = false\n'
        '[ingest]\nfrom = "."\npattern = "none"\n[finalize]\n'
    )
    return f
