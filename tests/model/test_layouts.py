import math
import re

import numpy as np
import pyarrow as pa
import pytest
from helpers import run_cli

from loader.errors import LayoutError, UnknownLayoutError
from loader.model.layouts import Field, Layout, builtin_schema_dir, get_layout, parse_layout_toml


def scidb96_values():
    rec = {f"d{i}": (i + 0.5) * -3.25 for i in range(10)}
    rec.update(i0=-7, i1=2**31 - 1, i2=-(2**31), i3=123456)
    return rec


def test_scidb96_numpy_view():
    lay = get_layout("scidb96")
    assert lay.record_size == 96
    assert lay.dtype.names == tuple([f"d{i}" for i in range(10)] + [f"i{i}" for i in range(4)])
    assert [lay.dtype.fields[f"d{i}"][1] for i in range(10)] == list(range(0, 80, 8))
    assert [lay.dtype.fields[f"i{i}"][1] for i in range(4)] == [80, 84, 88, 92]
    assert all(lay.dtype.fields[n][0].byteorder in "<=|" for n in lay.dtype.names)
    assert lay.framable and lay.capnp_words == 12


def test_scidb96_arrow_view_matches_numpy():
    lay = get_layout("scidb96")
    schema = lay.arrow_schema
    assert schema.names == list(lay.dtype.names)
    for f in schema:
        assert f.type == pa.from_numpy_dtype(lay.dtype.fields[f.name][0])
    assert schema.metadata[b"bulkload.layout"] == b"scidb96"


def test_shipped_capnp_schema_is_generated_from_the_layout():
    lay = get_layout("scidb96")
    shipped = (builtin_schema_dir() / "scidb96.capnp").read_text()
    assert shipped == lay.capnp_text(), "regenerate schemas/scidb96.capnp from the layout"


def test_capnp_record_data_section_is_the_numpy_record_byte_for_byte():
    """Load the shipped .capnp with pycapnp, build a Record field by field, compare bytes."""
    import capnp

    lay = get_layout("scidb96")
    schema = capnp.load(str(builtin_schema_dir() / "scidb96.capnp"), imports=[])
    vals = scidb96_values()
    msg = schema.Batch.new_message()
    msg.start = 5
    recs = msg.init("records", 1)
    for k, v in vals.items():
        setattr(recs[0], k, v)
    raw = msg.to_bytes()
    # segment table (8) + root pointer (8) + start (8) + list pointer (8) + tag (8) = 40
    data = raw[40 : 40 + 96]
    arr = np.zeros(1, dtype=lay.dtype)
    for k, v in vals.items():
        arr[k] = v
    assert data == arr.tobytes()
    assert len(raw) == 40 + 96


@pytest.mark.parametrize(
    "types",
    [
        ["int32", "float64", "int32"],
        ["uint8", "int16", "uint8", "float32", "int64"],
        ["float64", "float64", "int32", "int32"],
    ],
)
def test_capnp_offsets_match_pycapnp(types):
    lay = Layout("odd", tuple(Field(f"f{i}", t) for i, t in enumerate(types)))
    mod = lay.capnp_module()
    msg = mod.Record.new_message()
    arr = np.zeros(lay.capnp_words * 8, dtype=np.uint8)
    for i, (t, m) in enumerate(zip(types, lay.capnp_members, strict=True)):
        v = i + 1 if "int" in t else i + 1.5
        setattr(msg, f"f{i}", v)
        one = np.array([v], dtype=lay.field(f"f{i}").dtype).view(np.uint8)
        arr[m.bit // 8 : m.bit // 8 + len(one)] = one
    raw = msg.to_bytes()
    # segment table (8) + root pointer (8) + data section
    assert raw[16 : 16 + lay.capnp_words * 8] == arr.tobytes()
    assert lay.framable == (types == ["float64", "float64", "int32", "int32"])


def test_user_layout_from_schemas_dir(tmp_path, monkeypatch):
    d = tmp_path / "schemas"
    d.mkdir()
    (d / "tick.toml").write_text(
        'name = "tick"\n[fields]\nts = "int64"\nprice = "float64"\nqty = "int32"\nside = "int32"\n'
    )
    monkeypatch.chdir(tmp_path)
    lay = get_layout("tick")
    assert lay.record_size == 24 and lay.framable
    assert get_layout(str(d / "tick.toml")) == lay


def test_unknown_layout_lists_known_ones():
    with pytest.raises(UnknownLayoutError, match=r"unknown layout 'nope'; known layouts: .*scidb96"):
        get_layout("nope")


@pytest.mark.parametrize(
    "text,msg",
    [
        ('name = "x"\n[fields]\na = "float128"\n', "unknown type 'float128'"),
        ('name = "x"\n[fields]\nmy_field = "int32"\n', "not allowed"),
        ('name = "x"\n[fields]\n', "declares no fields"),
        ('name = "x"\nfoo = 1\n[fields]\na = "int8"\n', "unknown key"),
        ('name = "x"\n[fields\n', "not valid TOML"),
    ],
)
def test_bad_layout_files(text, msg):
    with pytest.raises(LayoutError, match=msg):
        parse_layout_toml(text, "t.toml")


def test_layout_round_trips_through_manifest_dict():
    lay = get_layout("scidb96")
    assert Layout.from_dict(lay.to_dict()) == lay
    assert not math.isnan(lay.capnp_id) and lay.capnp_id >> 63 == 1


def test_a_layout_file_that_is_not_utf8_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "bad"\n[fields]\nx\xff = "int64"\n')
    says = f"{bad}: not valid TOML: byte 0xff at byte offset 23 is not UTF-8"
    with pytest.raises(LayoutError, match=re.escape(says)):
        get_layout(str(bad))
    p = run_cli("load", "gen://scidb96?n=3", f"lmdb://{tmp_path}/ds", "--layout", bad)
    assert p.returncode == 2 and p.stderr.startswith(f"bulkload: error: {says}") and "Traceback" not in p.stderr
    assert "unexpected error" not in p.stderr
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "bad.toml").write_bytes(bad.read_bytes())
    p = run_cli(
        "generate",
        "3",
        "--layout",
        "bad",
        "--out",
        tmp_path / "out.bin",
        env={"BULKLOAD_SCHEMAS": str(tmp_path / "schemas")},
    )
    assert p.returncode == 2 and "schemas/bad.toml: not valid TOML" in p.stderr, p.stderr
