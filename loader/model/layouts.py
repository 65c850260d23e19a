"""Record layouts: one declaration, three views (numpy dtype, Arrow schema, Cap'n Proto struct).

A layout is a named, ordered list of fixed-width fields, little-endian, packed with no
padding. It is declared once in a TOML file (see schemas/scidb96.toml)::

    name = "ticks"
    description = "..."
    [fields]
    ts = { type = "datetime64[ns]", tz = "UTC" }
    sym = "bytes[8]"
    price = "float64"
    venue = { type = "int16", nullable = true }

Field types (model/field_types.py): the integers, float16/32/64, bool,
datetime64[unit] / timedelta64[unit] (int64 of s, ms, us or ns), bytes[N], string[N]
(UTF-8, zero-padded) and number arrays T[k]. A field may be ``nullable``; a layout with
k >= 1 nullable fields ends with the field ``_validity`` of ceil(k/8) bytes: bit j (least
significant first, byte j // 8) is set when the j-th nullable field, in declaration order,
holds a value; a null field's bytes are all zero. ``_validity`` is in the numpy dtype
(``read_records``); Arrow and pandas get real nulls instead. A ``tz`` (datetime64 only)
is metadata: values are UTC instants, given back to Arrow and pandas with their zone.

and looked up by name (``--layout NAME``) in, in order: the directories of
``$BULKLOAD_SCHEMAS`` (colon-separated), ``./schemas/`` of the working directory, and
the schemas shipped with the package; or given as a path to a ``.toml`` file.

The Cap'n Proto ``Record`` struct is generated from the same declaration (layout_capnp.py:
every field in the data section). Its data section is laid out by Cap'n Proto's own
field-allocation rules; when those put every field at its packed offset and the record is
a whole number of 8-byte words (true for ``scidb96``), a Cap'n Proto record list *is* the
raw record bytes (``framable``).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import LayoutError, UnknownLayoutError, UsageError
from .field_types import NUMBERS, TYPE_HELP, TYPES, FieldType, TypeSpecError, parse_type, type_of_numpy
from .layout_capnp import Member, capnp_body, capnp_members, capnp_offsets, copy_runs, is_framable
from .plugins import load_plugins

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from numpy.typing import DTypeLike

__all__ = ["NUMBERS", "TYPES", "Field", "FieldType", "Layout", "capnp_offsets", "get_layout", "parse_type"]

_NAME_RE = re.compile(r"^[a-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class Field:
    """A field of a layout: its name, type (a type string, model/field_types.py), whether it
    may be null, and the time zone of a datetime64 field."""

    name: str
    type: str
    nullable: bool = False
    tz: str | None = None

    @property
    def spec(self) -> FieldType:
        return parse_type(self.type)

    @property
    def size(self) -> int:
        return self.spec.size

    @property
    def is_integer(self) -> bool:
        return self.spec.is_integer

    @property
    def dtype(self) -> np.dtype:
        """numpy type of the field (a sub-array type for T[k])."""
        import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it

        return np.dtype(self.spec.numpy_format)

    @property
    def arrow_type(self) -> pa.DataType:
        return self.spec.arrow_type(self.tz)

    def describe(self) -> str:
        """``venue:int16?``, ``ts:datetime64[ns](UTC)``: how info and messages show a field."""
        return f"{self.name}:{self.type}" + (f"({self.tz})" if self.tz else "") + ("?" if self.nullable else "")

    def to_list(self) -> list[Any]:
        """[name, type], or [name, type, {nullable, tz}] when it has either (manifests)."""
        opts = {k: v for k, v in (("nullable", self.nullable), ("tz", self.tz)) if v}
        return [self.name, self.type, opts] if opts else [self.name, self.type]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> Field:
        if len(item) == 2:
            return cls(str(item[0]), item[1])
        opts = dict(item[2])
        return cls(str(item[0]), item[1], bool(opts.get("nullable", False)), opts.get("tz"))


@dataclass(frozen=True)
class Layout:
    name: str
    fields: tuple[Field, ...]
    description: str = ""

    #: fixed-size records (plug-ins register other layouts, e.g. the documents' ``docs``)
    variable_length = False
    #: the record kind that stores them (loader/kinds: how a batch is made and checked)
    kind = "fixed"

    def __post_init__(self) -> None:
        if not self.fields:
            raise LayoutError(f"layout {self.name!r} declares no fields")
        seen = set()
        canonical = []
        for f in self.fields:
            where = f"layout {self.name!r}: field {f.name!r}"
            if not isinstance(f.name, str) or not _NAME_RE.match(f.name):
                raise LayoutError(
                    f"layout {self.name!r}: field name {f.name!r} is not allowed; use a letter "
                    "a-z then letters/digits (Cap'n Proto names: no underscores)"
                )
            try:
                spec = parse_type(f.type)
            except TypeSpecError as e:
                raise LayoutError(f"{where}: {e}") from None
            if not isinstance(f.nullable, bool):
                raise LayoutError(f"{where}: nullable must be true or false, not {f.nullable!r}")
            if f.tz is not None:
                _check_tz(f.tz, spec, where)
            if f.name in seen:
                raise LayoutError(f"layout {self.name!r}: field {f.name!r} is declared twice")
            seen.add(f.name)
            canonical.append(f if f.type == spec.name else Field(f.name, spec.name, f.nullable, f.tz))
        object.__setattr__(self, "fields", tuple(canonical))
        members = len(self.fields) + sum(f.spec.elements for f in self.fields) + self.validity_bytes
        if members > _MAX_CAPNP_FIELDS:
            raise LayoutError(
                f"layout {self.name!r} has {members:,} stored elements (bytes, array values); "
                f"a Cap'n Proto struct holds at most {_MAX_CAPNP_FIELDS:,}: split the layout"
            )

    # --- numpy --------------------------------------------------------------
    @functools.cached_property
    def dtype(self) -> np.dtype:
        """Packed little-endian structured dtype of one raw record (``_validity`` last, as
        ``(u1, (ceil(k/8),))``, when k fields are nullable)."""
        import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it

        spec: list[tuple[Any, ...]] = [(f.name, f.spec.numpy_format) for f in self.fields]
        if self.validity_bytes:
            spec.append((VALIDITY, "u1", (self.validity_bytes,)))
        return np.dtype(spec)

    @functools.cached_property
    def record_size(self) -> int:
        return sum(f.size for f in self.fields) + self.validity_bytes  # packed: the dtype's itemsize

    @functools.cached_property
    def nullable_names(self) -> tuple[str, ...]:
        """The nullable fields, in declaration order: bit j of ``_validity`` is the j-th one's."""
        return tuple(f.name for f in self.fields if f.nullable)

    @property
    def validity_bytes(self) -> int:
        return (len(self.nullable_names) + 7) // 8

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        """The fields' names (``_validity`` is not a field: it is in ``dtype.names``)."""
        return [f.name for f in self.fields]

    @property
    def numbers_only(self) -> bool:
        """Every field a single number, none nullable (the layouts before typed fields)."""
        return all(f.spec.is_number and f.type in TYPES and not f.nullable for f in self.fields)

    def describe_fields(self) -> str:
        return ", ".join(f.describe() for f in self.fields)

    # --- Cap'n Proto ----------------------------------------------------------
    @functools.cached_property
    def _capnp_layout(self) -> tuple[tuple[Member, ...], int]:
        return capnp_members(self)

    @property
    def capnp_words(self) -> int:
        """Words in the Cap'n Proto Record data section."""
        return self._capnp_layout[1]

    @property
    def capnp_members(self) -> tuple[Member, ...]:
        """Every stored element: its packed byte offset and Cap'n Proto bit offset."""
        return self._capnp_layout[0]

    @functools.cached_property
    def capnp_runs(self) -> list[tuple[int, int, int]]:
        """(packed offset, Cap'n Proto byte offset, bytes) of the byte-wide elements, in runs."""
        return copy_runs(self.capnp_members)

    def capnp_span(self, name: str) -> tuple[int, int] | None:
        """(byte offset in the Cap'n Proto data section, bytes) of field ``name`` when its
        stored elements lie there in one piece in packed order (any field but a bool);
        None for a bool (a bit there) or a field Cap'n Proto scattered."""
        mine = [m for m in self.capnp_members if m.field == name]
        if not mine or any(m.bits < 8 for m in mine):
            return None
        at, size = mine[0].bit // 8, mine[0].bits // 8
        if any(m.bit // 8 != at + i * size for i, m in enumerate(mine)):
            return None
        return at, size * len(mine)

    @functools.cached_property
    def capnp_bools(self) -> list[tuple[int, int]]:
        """(packed byte offset, Cap'n Proto bit offset) of each bool."""
        return [(m.packed, m.bit) for m in self.capnp_members if m.bits == 1]

    @functools.cached_property
    def capnp_dtype(self) -> np.dtype:
        """dtype of one element of a Cap'n Proto List(Record) (data section only): raw bytes
        (the serializer copies `capnp_runs` and `capnp_bools` between it and the records)."""
        import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it

        return np.dtype((np.void, self.capnp_words * 8))

    @property
    def framable(self) -> bool:
        """True when a List(Record) body is exactly the raw records, byte for byte."""
        return is_framable(self.capnp_members, self.capnp_words, self.record_size)

    @functools.cached_property
    def capnp_id(self) -> int:
        # Cap'n Proto aborts the process when two different files share an id: derive it
        # from everything that goes into the file.
        import hashlib  # start-up: only a layout's Cap'n Proto schema needs it (OpenSSL's load: ~3 ms)

        h = hashlib.blake2b((self.name + "\n" + self.capnp_body()).encode(), digest_size=8).digest()
        return int.from_bytes(h, "big") | (1 << 63)

    def capnp_body(self) -> str:
        return capnp_body(self)

    def capnp_text(self) -> str:
        """The .capnp schema file for this layout (Record and Batch)."""
        return (
            f"# Generated by bulkload from layout {self.name!r}; do not edit by hand.\n"
            f"@{self.capnp_id:#x};\n\n" + self.capnp_body()
        )

    def capnp_module(self) -> Any:  # a pycapnp schema module (untyped)
        """The loaded pycapnp schema module (has .Record and .Batch).

        The shipped schemas/NAME.capnp is used when it matches (one file per id per
        process: pycapnp aborts on a second file with the same id).
        """
        text = self.capnp_text()
        shipped = builtin_schema_dir() / f"{self.name}.capnp"
        if shipped.is_file() and shipped.read_text() == text:
            return _load_capnp_path(str(shipped))
        return _load_capnp(text)

    # --- Arrow ----------------------------------------------------------------
    @functools.cached_property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the records: native types, nullable fields nullable (no
        ``_validity``: Arrow has real nulls)."""
        import pyarrow as pa  # heavy: only Arrow paths need the schema (capnp loads do without)

        return pa.schema(
            [pa.field(f.name, f.arrow_type, nullable=f.nullable) for f in self.fields],
            metadata={"bulkload.layout": self.name},
        )

    # --- persistence ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "fields": [f.to_list() for f in self.fields],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Layout:
        """The layout a manifest or task describes (a registered one, e.g. ``docs``, by name)."""
        if d.get("variable_length"):
            return registered_layout(d["name"])
        return cls(d["name"], tuple(Field.from_list(item) for item in d["fields"]), d.get("description", ""))


#: the trailing field of a layout with nullable fields (not a legal field name: no clash)
VALIDITY = "_validity"
#: Cap'n Proto numbers a struct's fields @0..@65534
_MAX_CAPNP_FIELDS = 65000
_OFFSET_TZ = re.compile(r"^[+-]\d\d:\d\d$")


def _check_tz(tz: object, spec: FieldType, where: str) -> None:
    """LayoutError unless ``tz`` is a time zone (IANA name or +HH:MM) of a datetime64 field."""
    if spec.base != "datetime64":
        raise LayoutError(f"{where}: tz is for datetime64 fields, not {spec.name}; remove it")
    if not isinstance(tz, str) or not tz:
        raise LayoutError(f'{where}: tz must be a time zone name such as "UTC" or "+01:00", not {tz!r}')
    if _OFFSET_TZ.match(tz):
        return
    import zoneinfo  # only a layout with a named time zone checks it

    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise LayoutError(
            f"{where}: tz {tz!r} is not a known time zone; use an IANA name such as "
            '"UTC" or "America/New_York", or an offset such as "+01:00"'
        ) from None


# --- layouts from numpy dtypes (in-memory records, user generators, .npy files) ---------------

_LITTLE = sys.byteorder == "little"
_REPACK = "repack it: numpy.lib.recfunctions.repack_fields(arr)"


def layout_from_dtype(dtype: DTypeLike, name: str) -> Layout:
    """The layout named ``name`` whose records are exactly the bytes of ``dtype``.

    A layout is packed and little-endian, so the dtype must be too: every field of a
    layout type (a number, bool, datetime64/timedelta64 of s..ns, S bytes, a 1-D sub-array
    of numbers) at the offset right after the previous one, no trailing padding (an
    ``align=True`` dtype with holes, a big-endian, nested or other field is a LayoutError
    naming the field and the fix); field names as a layout's."""
    import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it

    dtype = np.dtype(dtype)
    if dtype.names is None or dtype.fields is None:
        raise LayoutError(
            f"dtype {dtype} has no named fields; records need a structured dtype, "
            "e.g. np.dtype([('x', '<i8'), ('y', '<f8')])"
        )
    fields, offset = [], 0
    if VALIDITY in dtype.names:
        raise LayoutError(
            f"dtype {dtype} has a {VALIDITY} field: records of a layout with nullable fields, which "
            "the dtype does not name; pass the layout (layout=, --layout)"
        )
    dtype_fields = dtype.fields
    for fname in dtype.names:
        ftype, at = dtype_fields[fname][:2]
        fields.append(Field(fname, _type_of(fname, ftype)))
        if at != offset:
            raise LayoutError(
                f"field {fname!r} is at byte offset {at}, but layouts are packed (it would be at "
                f"{offset}): the dtype is aligned or padded; {_REPACK}"
            )
        offset += ftype.itemsize
    if dtype.itemsize != offset:
        raise LayoutError(
            f"records of dtype {dtype} are {dtype.itemsize} bytes but its fields take {offset} "
            f"(trailing padding); {_REPACK}"
        )
    return Layout(name, tuple(fields))


def _type_of(fname: str, ftype: np.dtype) -> str:
    """The layout type of one dtype field, or a LayoutError naming the field."""
    if ftype.names is not None:
        raise LayoutError(
            f"field {fname!r} is a nested record ({ftype}); layout fields are values: "
            "flatten it into one field per value"
        )
    one = ftype.subdtype[0] if ftype.subdtype is not None else ftype
    if one.byteorder == ">" or (one.byteorder == "=" and not _LITTLE):
        raise LayoutError(
            f"field {fname!r} is big-endian ({one.str}); layouts are little-endian: "
            "arr.astype(arr.dtype.newbyteorder('<'))"
        )
    found = type_of_numpy(ftype)
    if found is None:
        raise LayoutError(
            f"field {fname!r} has type {describe_dtype(ftype)}, which no layout field has; "
            f"a field is one of {TYPE_HELP}{_U_HINT if one.kind == 'U' else ''}"
        )
    return found


_U_HINT = " (numpy U text is 4 bytes a character: declare a layout with string[N] and load it by conversion)"


def describe_dtype(dtype: np.dtype) -> str:
    """``float64 (<f8)``: a dtype's name and its byte-order code (once when they are equal)."""
    return str(dtype) if str(dtype) == dtype.str else f"{dtype} ({dtype.str})"


def dtype_mismatch(dtype: DTypeLike, layout: Layout | np.dtype) -> str | None:
    """Why records of ``dtype`` are not records of ``layout`` (or of that dtype) byte for
    byte: the first field whose name, type or offset differs, a missing or extra field,
    padding; None when they are."""
    import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it

    dtype = np.dtype(dtype)
    want = layout.dtype if isinstance(layout, Layout) else np.dtype(layout)
    want_names = want.names or ()
    want_fields: Mapping[str, tuple[Any, ...]] = want.fields or {}
    if dtype.names is None or dtype.fields is None:
        return f"dtype {dtype} has no named fields (the layout's first is {want_names[0]!r})"
    names, fields = dtype.names, dtype.fields
    for i, wname in enumerate(want_names):
        (wtype, wat) = want_fields[wname][:2]
        if i >= len(names):
            return f"field {wname!r} ({describe_dtype(wtype)}) is missing"
        name = names[i]
        (ftype, at) = fields[name][:2]
        if name != wname:
            return f"field {i} is {name!r}, the layout's is {wname!r}"
        if ftype != wtype:
            return f"field {name!r} is {describe_dtype(ftype)}, the layout's is {describe_dtype(wtype)}"
        if at != wat:
            return f"field {name!r} is at byte offset {at}, the layout's at {wat} (aligned or padded); {_REPACK}"
    if len(names) > len(want_names):
        return f"field {names[len(want_names)]!r} is not in the layout"
    if dtype.itemsize != want.itemsize:
        return f"records are {dtype.itemsize} bytes, the layout's {want.itemsize} (trailing padding); {_REPACK}"
    return None


def declared_layout_with(dtype: DTypeLike) -> Layout | None:
    """The first declared layout (``$BULKLOAD_SCHEMAS``, ./schemas, the shipped ones, by
    name) whose records are exactly ``dtype``'s bytes, or None."""
    names: set[str] = set()
    for d in [*_search_dirs(), builtin_schema_dir()]:
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    for name in sorted(names):
        try:
            layout = get_layout(name)
        except UsageError:
            continue  # a broken declaration is reported when it is asked for by name
        if layout.dtype == dtype and dtype_mismatch(dtype, layout) is None:
            return layout
    return None


def known_layout(have: Layout) -> Layout:
    """A known layout with exactly the fields of ``have`` (so that records of it can join
    a dataset of it, e.g. ``scidb96``), else ``have``."""
    for name in available_layouts():
        try:
            known = get_layout(name)
        except UsageError:
            continue  # a broken declaration in ./schemas is reported when it is asked for by name
        if not known.variable_length and known.fields == have.fields:
            return known
    return have


# --- a layout of a dtype's fields, converted by field (.npy files, Arrow / Parquet schemas) -------


def layout_of_fields(dtype: np.dtype, name: str) -> Layout:
    """The layout named ``name`` whose fields are those of the structured ``dtype``, in
    its order (unlike `layout_from_dtype`, whose records must be the dtype's bytes as they are), each with the layout type of the same kind and size (any byte order,
    offsets or padding: the layout is packed little-endian; readers convert by field).

    LayoutError naming the first field that has no layout type (U text, objects, other
    datetime units, nested records), or when ``dtype`` has no fields at all."""
    import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it

    dtype = np.dtype(dtype)
    if dtype.names is None or dtype.fields is None:
        raise LayoutError(
            f"{dtype} is not a record type: a layout needs named fields (a structured dtype "
            "such as [('x', '<f8'), ('i', '<i4')], or a table's columns)"
        )
    fields = []
    dtype_fields = dtype.fields
    for field_name in dtype.names:
        ftype = dtype_fields[field_name][0]
        type_name = type_of_numpy(ftype)
        if type_name is None:
            raise LayoutError(
                f"field {field_name!r} has type {ftype}, which no layout type holds; a field is one of {TYPE_HELP}"
            )
        fields.append(Field(field_name, type_name))
    return Layout(name, tuple(fields))


# --- layouts registered by plug-ins (e.g. the documents' ``docs``) ---------------------------

#: a plug-in's layout object duck-types Layout (e.g. docs/layout.py's DocsLayout)
_REGISTERED: dict[str, Layout] = {}


def register_layout(layout: object) -> None:
    """Make a plug-in's layout object findable by name (``--layout NAME``, manifests)."""
    registered = cast(Layout, layout)  # a plug-in's own class, which duck-types Layout
    _REGISTERED[registered.name] = registered


def registered_layout(name: str) -> Layout:
    """The registered layout ``name`` (plug-ins loaded on a miss); UnknownLayoutError if none."""
    found = _find_registered(name)
    if found is None:
        raise UnknownLayoutError(f"unknown layout {name!r}: no installed plug-in provides it")
    return found


def _find_registered(name: str) -> Layout | None:
    while name not in _REGISTERED and load_plugins():
        pass
    return _REGISTERED.get(name)


@functools.cache
def _load_capnp(text: str) -> Any:  # a pycapnp schema module (untyped)
    # pycapnp loads from files; keep one file per distinct schema text for the process.
    import hashlib  # start-up: only a layout's Cap'n Proto schema needs them
    import tempfile

    d = Path(tempfile.gettempdir()) / f"bulkload-capnp-{os.getuid()}"
    d.mkdir(parents=True, exist_ok=True)
    name = "l" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest() + ".capnp"
    path = d / name
    if not path.exists():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return _load_capnp_path(str(path))


@functools.cache
def _load_capnp_path(path: str) -> Any:  # a pycapnp schema module (untyped)
    import capnp  # heavy: only Cap'n Proto readers of a layout's schema need pycapnp

    return capnp.load(path, imports=[])


def read_toml_text(path: str | os.PathLike[str], error: type[Exception]) -> str:
    """The text of the TOML file ``path``; ``error`` (a UsageError: exit 2) if it cannot be
    read or is not UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror or e}") from None
    return toml_text(raw, path, error)


def toml_text(raw: bytes, path: object, error: type[Exception]) -> str:
    """``raw``, the bytes of the TOML file ``path``, as text; ``error`` naming the byte
    offset if they are not UTF-8 (as TOML requires)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"{path}: not valid TOML: byte 0x{raw[e.start]:02x} at byte offset {e.start} is not UTF-8 "
            "(TOML files are UTF-8); save the file as UTF-8"
        ) from None


def parse_layout_toml(text: str, origin: str) -> Layout:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LayoutError(f"{origin}: not valid TOML: {e}") from None
    unknown = set(data) - {"name", "description", "fields"}
    if unknown:
        raise LayoutError(
            f"{origin}: unknown key(s) {', '.join(sorted(unknown))}; a layout file has name, description and [fields]"
        )
    if "name" not in data or not isinstance(data.get("fields"), dict):
        raise LayoutError(f'{origin}: a layout file needs `name = "..."` and a [fields] table')
    fields = [_toml_field(k, v, origin) for k, v in data["fields"].items()]
    try:
        return Layout(str(data["name"]), tuple(fields), str(data.get("description", "")))
    except LayoutError as e:
        raise LayoutError(f"{origin}: {e}") from None


_FIELD_KEYS = ("type", "nullable", "tz")


def _toml_field(name: str, value: object, origin: str) -> Field:
    """A [fields] entry: ``name = "TYPE"`` or ``name = { type = "TYPE", nullable = true, tz = "UTC" }``."""
    if isinstance(value, str):
        return Field(name, value)
    example = f'{name} = "int32" or {name} = {{ type = "int16", nullable = true }}'
    if not isinstance(value, dict):
        raise LayoutError(f"{origin}: field {name!r} must be a type name or a table, got {value!r}; write {example}")
    unknown = sorted(set(value) - set(_FIELD_KEYS))
    if unknown:
        raise LayoutError(
            f"{origin}: field {name!r} has unknown key(s) {', '.join(unknown)}; a field table has "
            f"{', '.join(_FIELD_KEYS)} (e.g. {example})"
        )
    if not isinstance(value.get("type"), str):
        raise LayoutError(f'{origin}: field {name!r} needs `type = "..."`; write {example}')
    nullable = value.get("nullable", False)
    if not isinstance(nullable, bool):
        raise LayoutError(f"{origin}: field {name!r}: nullable must be true or false, not {nullable!r}")
    return Field(name, value["type"], nullable, value.get("tz"))


def _search_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("BULKLOAD_SCHEMAS", "").split(":") if p]
    dirs.append(Path.cwd() / "schemas")
    return dirs


def builtin_schema_dir() -> Path:
    # what importlib.resources.files says of a package in a directory, without its ~3 ms of imports (start-up)
    schemas = importlib.import_module("loader.schemas").__file__
    assert schemas is not None  # a regular package, shipped with its __init__.py
    return Path(schemas).parent


def fields_difference(have: Iterable[Field | Sequence[Any]], other: Iterable[Field | Sequence[Any]]) -> str:
    """How the fields ``have`` differ from ``other`` (each a sequence of (name, type) pairs
    or Fields): the first field that differs, for messages about two layouts of one name."""
    a = [(f if isinstance(f, Field) else Field.from_list(f)).describe() for f in have]
    b = [(f if isinstance(f, Field) else Field.from_list(f)).describe() for f in other]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"field {i + 1} is {x}, not {y}"
    return f"{len(a)} fields, not {len(b)}"


#: the layout of raw records when neither --layout nor the dataset gives one
DEFAULT_LAYOUT = "scidb96"


def available_layouts() -> list[str]:
    names: set[str] = set()
    for d in [*_search_dirs(), builtin_schema_dir()]:
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    load_plugins()
    names.update(_REGISTERED)
    return sorted(names)


def get_layout(name_or_path: str | Layout) -> Layout:
    """Find a layout by name or by path to its .toml file."""
    if isinstance(name_or_path, Layout):
        return name_or_path
    if getattr(name_or_path, "variable_length", False):  # a plug-in's layout object (duck-types Layout)
        return cast(Layout, name_or_path)
    ref = str(name_or_path)
    if ref in _REGISTERED:  # a plug-in's layout, e.g. the documents' docs
        return _REGISTERED[ref]
    if ref.endswith(".toml") or os.sep in ref:
        p = Path(ref)
        if not p.is_file():
            raise UnknownLayoutError(f"layout file {ref} does not exist")
        return parse_layout_toml(read_toml_text(p, LayoutError), str(p))
    return _get_named(ref, tuple(str(d) for d in _search_dirs()))


@functools.cache
def _get_named(name: str, dirs: tuple[str, ...]) -> Layout:
    for d in [*map(Path, dirs), builtin_schema_dir()]:
        p = d / f"{name}.toml"
        if p.is_file():
            layout = parse_layout_toml(read_toml_text(p, LayoutError), str(p))
            if layout.name != name:
                raise LayoutError(f"{p}: declares name {layout.name!r}, expected {name!r}")
            return layout
    found = _find_registered(name)
    if found is not None:
        return found
    raise UnknownLayoutError(
        f"unknown layout {name!r}; known layouts: {', '.join(available_layouts()) or 'none'} "
        "(declare one in schemas/NAME.toml or pass a path to a .toml file)"
    )
