"""Typed layout fields: parsing, numpy / Arrow / Cap'n Proto views, nullability, refusals."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.errors import LayoutError
from loader.model.field_types import parse_type
from loader.model.layouts import Field, Layout, layout_from_dtype, layout_of_fields, parse_layout_toml

TICKS_TOML = """name = "tk"
[fields]
ts = { type = "datetime64[ns]", tz = "UTC" }
d = "timedelta64[us]"
ok = "bool"
sym = "bytes[8]"
name = "string[12]"
v = "float32[3]"
h = "float16"
venue = { type = "int16", nullable = true }
px = "float64"
flag = { type = "bool", nullable = true }
"""


def test_every_type_has_its_numpy_dtype_and_arrow_type():
    lay = parse_layout_toml(TICKS_TOML, "tk.toml")
    assert lay.dtype == np.dtype(
        [
            ("ts", "<M8[ns]"),
            ("d", "<m8[us]"),
            ("ok", "?"),
            ("sym", "S8"),
            ("name", "S12"),
            ("v", "<f4", (3,)),
            ("h", "<f2"),
            ("venue", "<i2"),
            ("px", "<f8"),
            ("flag", "?"),
            ("_validity", "u1", (1,)),
        ]
    )
    assert lay.record_size == lay.dtype.itemsize == 8 + 8 + 1 + 8 + 12 + 12 + 2 + 2 + 8 + 1 + 1
    s = lay.arrow_schema
    assert [f.type for f in s] == [
        pa.timestamp("ns", "UTC"),
        pa.duration("us"),
        pa.bool_(),
        pa.binary(8),
        pa.string(),
        pa.list_(pa.float32(), 3),
        pa.float16(),
        pa.int16(),
        pa.float64(),
        pa.bool_(),
    ]
    assert [f.nullable for f in s] == [False] * 7 + [True, False, True]
    assert lay.nullable_names == ("venue", "flag")
    assert "_validity" not in s.names and lay.names == [n for n in lay.dtype.names if n != "_validity"]


def test_type_names_are_canonical_and_round_trip_through_the_manifest_dict():
    lay = Layout("x", (Field("ts", "datetime64[ ns ]", tz="Europe/Paris"), Field("q", "int8", nullable=True)))
    assert lay.fields[0].type == "datetime64[ns]"
    assert Layout.from_dict(lay.to_dict()) == lay
    assert lay.to_dict()["fields"] == [
        ["ts", "datetime64[ns]", {"tz": "Europe/Paris"}],
        ["q", "int8", {"nullable": True}],
    ]
    assert lay.describe_fields() == "ts:datetime64[ns](Europe/Paris), q:int8?"


def test_validity_has_one_bit_per_nullable_field_in_whole_bytes():
    fields = tuple(Field(f"f{i}", "int8", nullable=i % 2 == 0) for i in range(17))  # 9 nullable
    lay = Layout("v", fields)
    assert lay.nullable_names == tuple(f"f{i}" for i in range(0, 17, 2))
    assert lay.validity_bytes == 2 and lay.dtype["_validity"] == np.dtype(("u1", (2,)))
    assert lay.record_size == 17 + 2
    assert Layout("n", (Field("a", "int8"),)).validity_bytes == 0


@pytest.mark.parametrize(
    "entry,msg",
    [
        ('a = "float128"', r"x\.toml: layout 'x': field 'a': unknown type 'float128'; use one of int8"),
        ('a = "bytes[0]"', r"field 'a': type 'bytes\[0\]': the count must be 1\.\.4096"),
        ('a = "string[N]"', r"field 'a': type 'string\[N\]': string\[N\] needs a byte count N"),
        ('a = "bytes"', r"field 'a': type 'bytes': bytes\[N\] needs a byte count N, e\.g\. bytes\[8\]"),
        ('a = "datetime64"', r"field 'a': type 'datetime64' needs a unit: datetime64\[s\]"),
        ('a = "datetime64[D]"', r"needs a unit"),
        ('a = "bool[3]"', r"field 'a': type 'bool\[3\]': arrays are of number types only"),
        ('a = "int32[5000]"', r"the count must be 1\.\.4096"),
        ('a = { type = "int16", tz = "UTC" }', r"field 'a': tz is for datetime64 fields, not int16; remove it"),
        (
            'a = { type = "datetime64[s]", tz = "Mars/Olympus" }',
            r"field 'a': tz 'Mars/Olympus' is not a known time zone",
        ),
        ('a = { type = "int16", nullable = "yes" }', r"field 'a': nullable must be true or false"),
        (
            'a = { type = "int16", null = true }',
            r"field 'a' has unknown key\(s\) null; a field table has type, nullable, tz",
        ),
        ("a = { nullable = true }", r"field 'a' needs `type = \"...\"`"),
        ("a = 3", r"field 'a' must be a type name or a table"),
        ('_validity = "uint8"', r"field name '_validity' is not allowed"),
    ],
)
def test_a_bad_field_is_one_layout_error_naming_the_file_the_field_and_the_fix(entry, msg):
    with pytest.raises(LayoutError, match=msg) as e:
        parse_layout_toml(f'name = "x"\n[fields]\n{entry}\n', "x.toml")
    assert "\n" not in str(e.value) and "x.toml" in str(e.value)


def test_timezones_may_be_names_or_offsets():
    lay = parse_layout_toml('name = "z"\n[fields]\nt = { type = "datetime64[ms]", tz = "+05:30" }\n', "z.toml")
    assert lay.arrow_schema.field("t").type == pa.timestamp("ms", "+05:30")


# --- Cap'n Proto ----------------------------------------------------------------------------

_SLOT_BITS = {
    "bool": 1,
    "int8": 8,
    "uint8": 8,
    "int16": 16,
    "uint16": 16,
    "int32": 32,
    "uint32": 32,
    "float32": 32,
    "int64": 64,
    "uint64": 64,
    "float64": 64,
}


def _pycapnp_bit_offsets(schema, prefix="") -> dict:
    """Bit offset of every data field pycapnp's compiled schema has (groups: ``g.b0``)."""
    found = {}
    for f in schema.node.struct.fields:
        if f.which() == "slot":
            found[prefix + f.name] = f.slot.offset * _SLOT_BITS[f.slot.type.which()]
        else:
            found.update(_pycapnp_bit_offsets(schema.fields[f.name].schema, f"{prefix}{f.name}."))
    return found


def _capnp_key(lay: Layout, key: str) -> str:
    field, _, i = key.partition(".")
    if field == "_validity":
        return f"validity.b{i}"
    if not i:
        return field
    return f"{field}.{'e' if lay.field(field).spec.count else 'b'}{i}"


def check_capnp_offsets(lay: Layout) -> None:
    mod = lay.capnp_module()
    assert mod.Record.schema.node.struct.dataWordCount == lay.capnp_words
    assert mod.Record.schema.node.struct.pointerCount == 0
    offsets = _pycapnp_bit_offsets(mod.Record.schema)
    assert {_capnp_key(lay, m.key): m.bit for m in lay.capnp_members} == offsets


def test_the_generated_capnp_schema_loads_in_pycapnp_with_the_offsets_we_compute():
    lay = parse_layout_toml(TICKS_TOML, "tk.toml")
    check_capnp_offsets(lay)
    text = lay.capnp_text()
    assert 'ts @0 :Int64 $layoutType("datetime64[ns]") $tz("UTC");' in text
    assert "ok @2 :Bool;" in text and "venue @" in text and "$nullable" in text
    assert 'sym :group $layoutType("bytes[8]") { b0 @3 :UInt8;' in text
    assert "validity :group $validity" in text
    assert not lay.framable  # a Bool is a bit in Cap'n Proto, a byte in the record


def test_the_validity_group_is_renamed_when_a_field_is_called_validity():
    lay = Layout("w", (Field("validity", "int64"), Field("x", "int32", nullable=True)))
    assert "validity1 :group $validity" in lay.capnp_text()
    lay.capnp_module()


def test_layouts_of_whole_words_stay_framable():
    lay = Layout("f", (Field("ts", "datetime64[ns]"), Field("sym", "bytes[8]"), Field("v", "float32[2]")))
    assert lay.framable
    check_capnp_offsets(lay)


_TYPES = st.sampled_from(
    [
        "int8",
        "uint16",
        "int32",
        "float64",
        "float16",
        "bool",
        "datetime64[us]",
        "timedelta64[s]",
        "bytes[3]",
        "string[5]",
        "float32[3]",
        "int64[2]",
        "uint8[7]",
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_TYPES, st.booleans()), min_size=1, max_size=10))
def test_capnp_offsets_match_pycapnp_for_any_layout(fields):
    lay = Layout("h", tuple(Field(f"f{i}", t, nullable=n) for i, (t, n) in enumerate(fields)))
    check_capnp_offsets(lay)


# --- inference from numpy dtypes -------------------------------------------------------------


def test_numpy_dtypes_of_every_type_infer_their_layout_types():
    dt = np.dtype(
        [
            ("ts", "<M8[ns]"),
            ("d", "<m8[ms]"),
            ("ok", "?"),
            ("sym", "S8"),
            ("v", "<f4", (3,)),
            ("h", "<f2"),
            ("q", "<i4"),
        ]
    )
    lay = layout_from_dtype(dt, "r")
    assert [f.type for f in lay.fields] == [
        "datetime64[ns]",
        "timedelta64[ms]",
        "bool",
        "bytes[8]",
        "float32[3]",
        "float16",
        "int32",
    ]
    assert lay.dtype == dt
    assert [f.type for f in layout_of_fields(dt.newbyteorder(">"), "r").fields] == [f.type for f in lay.fields]


@pytest.mark.parametrize(
    "ftype,msg",
    [
        ("<U4", r"field 'a' has type <U4.*numpy U text is 4 bytes a character: declare a layout with string\[N\]"),
        ("<M8[D]", r"field 'a' has type datetime64\[D\]"),
        (("<f4", (2, 2)), r"field 'a' has type \('<f4', \(2, 2\)\)"),
        ("O", r"field 'a' has type object"),
    ],
)
def test_a_numpy_field_of_no_layout_type_is_refused_naming_it(ftype, msg):
    with pytest.raises(LayoutError, match=msg):
        layout_from_dtype(np.dtype([("a", ftype)]), "r")


def test_parse_type_is_the_one_parser():
    assert parse_type("string[16]").size == 16 and parse_type("float32[3]").size == 12
    assert parse_type("bool").size == 1 and parse_type("timedelta64[ns]").size == 8


def test_capnp_span_says_where_a_field_lies_in_one_piece():
    lay = parse_layout_toml(TICKS_TOML, "tk.toml")
    assert lay.capnp_span("ts") == (0, 8) and lay.capnp_span("sym") == (17, 8)  # after ts, d and ok's bit
    assert lay.capnp_span("ok") is None  # a bit
    for f in lay.fields:
        span = lay.capnp_span(f.name)
        assert span is None or span[1] == f.size
