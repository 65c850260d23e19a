"""A layout's Cap'n Proto ``Record`` struct: its schema text and where each stored element lies.

Every field stays in the struct's data section (no pointers), so a record list is one
block of fixed-size elements and the framing of serializers/capnp_framing.py holds for
every layout:

- a number is its Cap'n Proto type (float16: a UInt16 holding the IEEE half bits,
  annotated ``$layoutType("float16")``);
- ``bool`` is a ``Bool`` (one bit in Cap'n Proto, one byte 0/1 in the packed record);
- ``datetime64[u]`` / ``timedelta64[u]`` are an ``Int64`` count of the unit, annotated
  ``$layoutType("datetime64[ns]")`` (and ``$tz("UTC")`` for a zone): the documented
  convention, readable by any Cap'n Proto reader;
- ``bytes[N]`` / ``string[N]`` / ``T[k]`` are a group of N ``UInt8`` (``b0``..) or k
  values of T (``e0``..), annotated with the layout type: Cap'n Proto has no inline
  fixed-size array, and ``Data``/``Text``/``List`` are pointers, which would end the
  raw-record framing;
- a layout with nullable fields ends with the group ``validity`` (``validity1``, ... if
  a field has that name) of its ``_validity`` bytes, annotated ``$validity``; each
  nullable field is annotated ``$nullable``.

Cap'n Proto allocates data fields by its own rules (`capnp_bit_offsets`, a transcription
of the schema compiler's StructLayout): when they put every element at its packed offset
and the record is a whole number of words, a Record list *is* the raw records
(``framable``); otherwise the serializer copies the runs of `members` (and the bits of
the bools) between the two. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .layouts import Layout

_LG_BITS = {1: 0, 8: 3, 16: 4, 32: 5, 64: 6}
_CAPNP_BITS = {
    "Bool": 1,
    "Int8": 8,
    "UInt8": 8,
    "Int16": 16,
    "UInt16": 16,
    "Int32": 32,
    "UInt32": 32,
    "Float32": 32,
    "Int64": 64,
    "UInt64": 64,
    "Float64": 64,
}


def capnp_bit_offsets(bits: list[int]) -> tuple[list[int], int]:
    """Bit offsets Cap'n Proto gives data fields of these sizes in bits (1, 8, 16, 32, 64),
    in ordinal order, and the data words.

    A transcription of the schema compiler's StructLayout (holes are reused,
    a new word is split into halves whose upper parts become holes).
    """
    holes = [0] * 7  # holes[lg] = offset in units of 2**lg bits, 0 = none
    words = 0

    def try_allocate(lg: int) -> int | None:
        if lg >= 6:
            return None
        if holes[lg]:
            off, holes[lg] = holes[lg], 0
            return off
        nxt = try_allocate(lg + 1)
        if nxt is None:
            return None
        holes[lg] = nxt * 2 + 1
        return nxt * 2

    offsets = []
    for size in bits:
        lg = _LG_BITS[size]
        off = try_allocate(lg)
        if off is None:
            off = words << (6 - lg)
            words += 1
            o, g = off + 1, lg
            while g < 6:
                holes[g] = o
                g += 1
                o = (o + 1) // 2
        offsets.append(off << lg)
    return offsets, words


def capnp_offsets(sizes: list[int]) -> tuple[list[int], int]:
    """Byte offsets Cap'n Proto gives data fields of these sizes in bytes, and the data words."""
    offsets, words = capnp_bit_offsets([s * 8 for s in sizes])
    return [o // 8 for o in offsets], words


@dataclass(frozen=True)
class Member:
    """One stored element: ``key`` (``name`` or ``name.i``) of layout field ``field``, its
    Cap'n Proto type, its byte offset in the packed record and bit offset in the data section."""

    key: str
    field: str
    capnp_type: str
    packed: int
    bit: int

    @property
    def bits(self) -> int:
        return _CAPNP_BITS[self.capnp_type]


def validity_name(layout: Layout) -> str:
    """The Cap'n Proto name of the ``_validity`` group: ``validity``, unless a field has it."""
    names, i = set(layout.names), 0
    while True:
        name = "validity" if i == 0 else f"validity{i}"
        if name not in names:
            return name
        i += 1


def capnp_members(layout: Layout) -> tuple[tuple[Member, ...], int]:
    """The stored elements of ``layout`` (packed offsets, Cap'n Proto types and bit offsets),
    in ordinal order, and the words of the data section."""
    elems: list[tuple[str, str, str, int]] = []  # key, field, capnp type, packed offset
    at = 0
    for f in layout.fields:
        t = f.spec
        n, size = t.elements, t.size // t.elements
        for i in range(n):
            key = f.name if n == 1 and t.base not in ("bytes", "string") and t.count is None else f"{f.name}.{i}"
            elems.append((key, f.name, t.capnp_type, at + i * size))
        at += t.size
    for i in range(layout.validity_bytes):
        elems.append((f"_validity.{i}", "_validity", "UInt8", at + i))
    bits, words = capnp_bit_offsets([_CAPNP_BITS[c] for _, _, c, _ in elems])
    return tuple(Member(k, f, c, p, b) for (k, f, c, p), b in zip(elems, bits)), words


def is_framable(members: tuple[Member, ...], words: int, record_size: int) -> bool:
    """Is a Record list exactly the packed records, byte for byte?"""
    return words * 8 == record_size and all(m.bits >= 8 and m.bit == m.packed * 8 for m in members)


def copy_runs(members: tuple[Member, ...]) -> list[tuple[int, int, int]]:
    """(packed offset, data-section byte offset, bytes) of the runs of byte-wide members that
    lie consecutively in both (a bytes[8] is one run): what the serializer copies."""
    runs: list[list[int]] = []
    for m in members:
        if m.bits < 8:
            continue
        size = m.bits // 8
        if runs and runs[-1][0] + runs[-1][2] == m.packed and runs[-1][1] + runs[-1][2] == m.bit // 8:
            runs[-1][2] += size
        else:
            runs.append([m.packed, m.bit // 8, size])
    return [(r[0], r[1], r[2]) for r in runs]


def capnp_body(layout: Layout) -> str:
    """The Record and Batch structs (and the annotations they use) of ``layout``."""
    members, _ = capnp_members(layout)
    by_field: dict[str, list[Member]] = {}
    for m in members:
        by_field.setdefault(m.field, []).append(m)
    ordinal = {m.key: i for i, m in enumerate(members)}
    used: set[str] = set()
    lines = ["struct Record {"]
    for f in layout.fields:
        t = f.spec
        notes = []
        if t.base in ("datetime64", "timedelta64", "bytes", "string", "float16") or t.count is not None:
            notes.append(f'$layoutType("{t.name}")')
            used.add("layoutType")
        if f.tz:
            notes.append(f'$tz("{f.tz}")')
            used.add("tz")
        if f.nullable:
            notes.append("$nullable")
            used.add("nullable")
        note = "".join(" " + n for n in notes)
        mine = by_field[f.name]
        if len(mine) == 1 and "." not in mine[0].key:
            lines.append(f"  {f.name} @{ordinal[mine[0].key]} :{mine[0].capnp_type}{note};")
            continue
        prefix = "b" if t.base in ("bytes", "string") else "e"
        inner = " ".join(f"{prefix}{i} @{ordinal[m.key]} :{m.capnp_type};" for i, m in enumerate(mine))
        lines.append(f"  {f.name} :group{note} {{ {inner} }}")
    if layout.validity_bytes:
        used.add("validity")
        inner = " ".join(f"b{i} @{ordinal[m.key]} :UInt8;" for i, m in enumerate(by_field["_validity"]))
        lines.append(f"  {validity_name(layout)} :group $validity {{ {inner} }}")
    lines += ["}", "", "struct Batch {", "  start @0 :UInt64;", "  records @1 :List(Record);", "}"]
    head = [_ANNOTATIONS[a] for a in ("layoutType", "tz", "nullable", "validity") if a in used]
    return ("\n".join(head) + "\n\n" if head else "") + "\n".join(lines) + "\n"


_ANNOTATIONS = {
    "layoutType": (
        "# the bulkload type of a field: datetime64[u] / timedelta64[u] are an Int64 count of\n"
        "# the unit u (since 1970-01-01 UTC for datetimes); bytes[N] / string[N] (UTF-8,\n"
        "# zero-padded) a group of N UInt8 b0..; T[k] a group of k T e0..; float16 a UInt16\n"
        "# holding the IEEE half-precision bits\n"
        "annotation layoutType(field, group) :Text;"
    ),
    "tz": "# the time zone of a datetime field (values are UTC instants)\nannotation tz(field) :Text;",
    "nullable": (
        "# a nullable field: bit j (byte j / 8, least significant bit first) of the validity\n"
        "# group is set when the j-th nullable field holds a value; a null field's bytes are 0\n"
        "annotation nullable(field, group) :Void;"
    ),
    "validity": "# the validity bits of the nullable fields\nannotation validity(group) :Void;",
}
