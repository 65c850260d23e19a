"""Record layouts: one declaration, three views (numpy dtype, Arrow schema, Cap'n Proto struct).

A layout is a named, ordered list of fixed-width fields, little-endian, packed with no
padding. It is declared once in a TOML file (see schemas/scidb96.toml)::

    name = "scidb96"
    description = "..."
    [fields]
    d0 = "float64"
    i0 = "int32"

and looked up by name (``--layout NAME``) in, in order: the directories of
``$BULKLOAD_SCHEMAS`` (colon-separated), ``./schemas/`` of the working directory, and
the schemas shipped with the package; or given as a path to a ``.toml`` file.

The Cap'n Proto ``Record`` struct is generated from the same declaration. Its data
section is laid out by Cap'n Proto's own field-allocation rules; when those put every
field at its packed offset and the record is a whole number of 8-byte words (true for
``scidb96``), a Cap'n Proto record list *is* the raw record bytes (``framable``).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LayoutError, UnknownLayoutError, UsageError
from .plugins import load_plugins

if TYPE_CHECKING:
    import numpy as np

# type name -> (numpy code, size in bytes, Cap'n Proto type, is integer)
TYPES: dict[str, tuple[str, int, str, bool]] = {
    "int8": ("<i1", 1, "Int8", True),
    "int16": ("<i2", 2, "Int16", True),
    "int32": ("<i4", 4, "Int32", True),
    "int64": ("<i8", 8, "Int64", True),
    "uint8": ("<u1", 1, "UInt8", True),
    "uint16": ("<u2", 2, "UInt16", True),
    "uint32": ("<u4", 4, "UInt32", True),
    "uint64": ("<u8", 8, "UInt64", True),
    "float32": ("<f4", 4, "Float32", False),
    "float64": ("<f8", 8, "Float64", False),
}

_NAME_RE = re.compile(r"^[a-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class Field:
    name: str
    type: str

    @property
    def size(self) -> int:
        return TYPES[self.type][1]

    @property
    def is_integer(self) -> bool:
        return TYPES[self.type][3]


def capnp_offsets(sizes: list[int]) -> tuple[list[int], int]:
    """Byte offsets Cap'n Proto gives data fields of these sizes, and the data words.

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
    for size in sizes:
        lg = {1: 3, 2: 4, 4: 5, 8: 6}[size]
        off = try_allocate(lg)
        if off is None:
            off = words << (6 - lg)
            words += 1
            o, g = off + 1, lg
            while g < 6:
                holes[g] = o
                g += 1
                o = (o + 1) // 2
        offsets.append(off * size)
    return offsets, words


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
        for f in self.fields:
            if not _NAME_RE.match(f.name):
                raise LayoutError(
                    f"layout {self.name!r}: field name {f.name!r} is not allowed; use a letter "
                    "a-z then letters/digits (Cap'n Proto names: no underscores)"
                )
            if f.type not in TYPES:
                raise LayoutError(
                    f"layout {self.name!r}: field {f.name!r} has unknown type {f.type!r}; "
                    f"use one of {', '.join(TYPES)}"
                )
            if f.name in seen:
                raise LayoutError(f"layout {self.name!r}: field {f.name!r} is declared twice")
            seen.add(f.name)

    # --- numpy --------------------------------------------------------------
    @functools.cached_property
    def dtype(self) -> np.dtype:
        """Packed little-endian structured dtype of one raw record."""
        import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it
        return np.dtype([(f.name, TYPES[f.type][0]) for f in self.fields])

    @property
    def record_size(self) -> int:
        return sum(f.size for f in self.fields)  # packed: the dtype's itemsize

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    # --- Cap'n Proto ----------------------------------------------------------
    @functools.cached_property
    def _capnp_layout(self) -> tuple[list[int], int]:
        return capnp_offsets([f.size for f in self.fields])

    @property
    def capnp_words(self) -> int:
        """Words in the Cap'n Proto Record data section."""
        return self._capnp_layout[1]

    @functools.cached_property
    def capnp_dtype(self) -> np.dtype:
        """dtype of one element of a Cap'n Proto List(Record) (data section only)."""
        import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it
        offsets, words = self._capnp_layout
        return np.dtype(
            {
                "names": self.names,
                "formats": [TYPES[f.type][0] for f in self.fields],
                "offsets": offsets,
                "itemsize": words * 8,
            }
        )

    @property
    def framable(self) -> bool:
        """True when a List(Record) body is exactly the raw records, byte for byte."""
        offsets, words = self._capnp_layout
        return list(offsets) == [self.dtype.fields[n][1] for n in self.names] and words * 8 == self.record_size

    @functools.cached_property
    def capnp_id(self) -> int:
        # Cap'n Proto aborts the process when two different files share an id: derive it
        # from everything that goes into the file.
        import hashlib  # start-up: only a layout's Cap'n Proto schema needs it (OpenSSL's load: ~3 ms)
        h = hashlib.blake2b((self.name + "\n" + self.capnp_body()).encode(), digest_size=8).digest()
        return int.from_bytes(h, "big") | (1 << 63)

    def capnp_body(self) -> str:
        lines = ["struct Record {"]
        for i, f in enumerate(self.fields):
            lines.append(f"  {f.name} @{i} :{TYPES[f.type][2]};")
        lines.append("}")
        lines.append("")
        lines.append("struct Batch {")
        lines.append("  start @0 :UInt64;")
        lines.append("  records @1 :List(Record);")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def capnp_text(self) -> str:
        """The .capnp schema file for this layout (Record and Batch)."""
        return (
            f"# Generated by bulkload from layout {self.name!r}; do not edit by hand.\n"
            f"@{self.capnp_id:#x};\n\n" + self.capnp_body()
        )

    def capnp_module(self):
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
    def arrow_schema(self):
        import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it
        import pyarrow as pa  # heavy: only Arrow paths need the schema (capnp loads do without)

        return pa.schema(
            [pa.field(f.name, pa.from_numpy_dtype(np.dtype(TYPES[f.type][0])), nullable=False)
             for f in self.fields],
            metadata={"bulkload.layout": self.name},
        )

    # --- persistence ----------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "fields": [[f.name, f.type] for f in self.fields],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Layout":
        """The layout a manifest or task describes (a registered one, e.g. ``docs``, by name)."""
        if d.get("variable_length"):
            return registered_layout(d["name"])
        return cls(d["name"], tuple(Field(n, t) for n, t in d["fields"]), d.get("description", ""))


# --- layouts from numpy dtypes (in-memory records, user generators, .npy files) ---------------

#: (numpy kind, itemsize) -> layout type name
_TYPE_OF_KIND = {(code[1], size): name for name, (code, size, _, _) in TYPES.items()}  # "<f8": kind "f"
_LITTLE = sys.byteorder == "little"
_REPACK = "repack it: numpy.lib.recfunctions.repack_fields(arr)"


def layout_from_dtype(dtype, name: str) -> Layout:
    """The layout named ``name`` whose records are exactly the bytes of ``dtype``.

    A layout is packed and little-endian, so the dtype must be too: every field a number
    type of TYPES at the offset right after the previous one, no trailing padding (an
    ``align=True`` dtype with holes, a big-endian, nested, sub-array or non-numeric field
    is a LayoutError naming the field and the fix); field names as a layout's."""
    import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it
    dtype = np.dtype(dtype)
    if dtype.names is None:
        raise LayoutError(f"dtype {dtype} has no named fields; records need a structured dtype, "
                          "e.g. np.dtype([('x', '<i8'), ('y', '<f8')])")
    fields, offset = [], 0
    for fname in dtype.names:
        ftype, at = dtype.fields[fname][:2]
        fields.append(Field(fname, _type_of(fname, ftype)))
        if at != offset:
            raise LayoutError(f"field {fname!r} is at byte offset {at}, but layouts are packed (it would be at "
                              f"{offset}): the dtype is aligned or padded; {_REPACK}")
        offset += ftype.itemsize
    if dtype.itemsize != offset:
        raise LayoutError(f"records of dtype {dtype} are {dtype.itemsize} bytes but its fields take {offset} "
                          f"(trailing padding); {_REPACK}")
    return Layout(name, tuple(fields))


def _type_of(fname: str, ftype: np.dtype) -> str:
    """The layout type of one dtype field, or a LayoutError naming the field."""
    if ftype.names is not None or ftype.subdtype is not None:
        raise LayoutError(f"field {fname!r} is {'a nested record' if ftype.names else 'a sub-array'} ({ftype}); "
                          "layout fields are single numbers: flatten it into one field per value")
    if ftype.byteorder == ">" or (ftype.byteorder == "=" and not _LITTLE):
        raise LayoutError(f"field {fname!r} is big-endian ({ftype.str}); layouts are little-endian: "
                          "arr.astype(arr.dtype.newbyteorder('<'))")
    found = _TYPE_OF_KIND.get((ftype.kind, ftype.itemsize))
    if found is None:
        raise LayoutError(f"field {fname!r} has type {describe_dtype(ftype)}, which no layout field has; "
                          f"use one of {', '.join(TYPES)}")
    return found


def describe_dtype(dtype: np.dtype) -> str:
    """``float64 (<f8)``: a dtype's name and its byte-order code (once when they are equal)."""
    return str(dtype) if str(dtype) == dtype.str else f"{dtype} ({dtype.str})"


def dtype_mismatch(dtype, layout: "Layout | np.dtype") -> str | None:
    """Why records of ``dtype`` are not records of ``layout`` (or of that dtype) byte for
    byte: the first field whose name, type or offset differs, a missing or extra field,
    padding; None when they are."""
    import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it
    dtype = np.dtype(dtype)
    want = layout.dtype if isinstance(layout, Layout) else np.dtype(layout)
    if dtype.names is None:
        return f"dtype {dtype} has no named fields (the layout's first is {want.names[0]!r})"
    for i, wname in enumerate(want.names):
        (wtype, wat) = want.fields[wname][:2]
        if i >= len(dtype.names):
            return f"field {wname!r} ({describe_dtype(wtype)}) is missing"
        name = dtype.names[i]
        (ftype, at) = dtype.fields[name][:2]
        if name != wname:
            return f"field {i} is {name!r}, the layout's is {wname!r}"
        if ftype != wtype:
            return f"field {name!r} is {describe_dtype(ftype)}, the layout's is {describe_dtype(wtype)}"
        if at != wat:
            return f"field {name!r} is at byte offset {at}, the layout's at {wat} (aligned or padded); {_REPACK}"
    if len(dtype.names) > len(want.names):
        return f"field {dtype.names[len(want.names)]!r} is not in the layout"
    if dtype.itemsize != want.itemsize:
        return f"records are {dtype.itemsize} bytes, the layout's {want.itemsize} (trailing padding); {_REPACK}"
    return None


def declared_layout_with(dtype) -> Layout | None:
    """The first declared layout (``$BULKLOAD_SCHEMAS``, ./schemas, the shipped ones, by
    name) whose records are exactly ``dtype``'s bytes, or None."""
    names = set()
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


# --- a layout of a dtype's fields, converted by field (.npy files, Arrow / Parquet schemas) -------



def layout_of_fields(dtype: np.dtype, name: str) -> Layout:
    """The layout named ``name`` whose fields are those of the structured ``dtype``, in
    its order (unlike `layout_from_dtype`, whose records must be the dtype's bytes as they are), each with the layout type of the same kind and size (any byte order,
    offsets or padding: the layout is packed little-endian; readers convert by field).

    LayoutError naming the first field that has no layout type (bool, float16, strings,
    dates, objects, sub-arrays), or when ``dtype`` has no fields at all."""
    import numpy as np  # start-up: a layout is read without numpy (info, --help); its dtype needs it
    dtype = np.dtype(dtype)
    if dtype.names is None:
        raise LayoutError(f"{dtype} is not a record type: a layout needs named fields (a structured dtype "
                          "such as [('x', '<f8'), ('i', '<i4')], or a table's columns)")
    fields = []
    for field_name in dtype.names:
        ftype = dtype.fields[field_name][0]
        type_name = _TYPE_OF_KIND.get((ftype.kind, ftype.itemsize)) if ftype.subdtype is None else None
        if type_name is None:
            raise LayoutError(f"field {field_name!r} has type {ftype}, which no layout type holds; a field is one "
                              f"of {', '.join(TYPES)}")
        fields.append(Field(field_name, type_name))
    return Layout(name, tuple(fields))


# --- layouts registered by plug-ins (e.g. the documents' ``docs``) ---------------------------

_REGISTERED: dict[str, object] = {}


def register_layout(layout) -> None:
    """Make a plug-in's layout object findable by name (``--layout NAME``, manifests)."""
    _REGISTERED[layout.name] = layout


def registered_layout(name: str):
    """The registered layout ``name`` (plug-ins loaded on a miss); UnknownLayoutError if none."""
    found = _find_registered(name)
    if found is None:
        raise UnknownLayoutError(f"unknown layout {name!r}: no installed plug-in provides it")
    return found


def _find_registered(name: str):
    while name not in _REGISTERED and load_plugins():
        pass
    return _REGISTERED.get(name)


@functools.lru_cache(maxsize=None)
def _load_capnp(text: str):
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


@functools.lru_cache(maxsize=None)
def _load_capnp_path(path: str):
    import capnp  # heavy: only Cap'n Proto readers of a layout's schema need pycapnp

    return capnp.load(path, imports=[])


def read_toml_text(path, error: type[Exception]) -> str:
    """The text of the TOML file ``path``; ``error`` (a UsageError: exit 2) if it cannot be
    read or is not UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror or e}") from None
    return toml_text(raw, path, error)


def toml_text(raw: bytes, path, error: type[Exception]) -> str:
    """``raw``, the bytes of the TOML file ``path``, as text; ``error`` naming the byte
    offset if they are not UTF-8 (as TOML requires)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not valid TOML: byte 0x{raw[e.start]:02x} at byte offset {e.start} is not UTF-8 "
                    "(TOML files are UTF-8); save the file as UTF-8") from None


def parse_layout_toml(text: str, origin: str) -> Layout:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LayoutError(f"{origin}: not valid TOML: {e}") from None
    unknown = set(data) - {"name", "description", "fields"}
    if unknown:
        raise LayoutError(f"{origin}: unknown key(s) {', '.join(sorted(unknown))}; "
                          "a layout file has name, description and [fields]")
    if "name" not in data or not isinstance(data.get("fields"), dict):
        raise LayoutError(f"{origin}: a layout file needs `name = \"...\"` and a [fields] table")
    fields = []
    for k, v in data["fields"].items():
        if not isinstance(v, str):
            raise LayoutError(f"{origin}: field {k!r} must map to a type name string, got {v!r}")
        fields.append(Field(k, v))
    return Layout(str(data["name"]), tuple(fields), str(data.get("description", "")))


def _search_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("BULKLOAD_SCHEMAS", "").split(":") if p]
    dirs.append(Path.cwd() / "schemas")
    return dirs


def builtin_schema_dir() -> Path:
    # what importlib.resources.files says of a package in a directory, without its ~3 ms of imports (start-up)
    return Path(importlib.import_module("loader.schemas").__file__).parent


def fields_difference(have, other) -> str:
    """How the fields ``have`` differ from ``other`` (each a sequence of (name, type) pairs
    or Fields): the first field that differs, for messages about two layouts of one name."""
    a = [(f.name, f.type) if isinstance(f, Field) else tuple(f) for f in have]
    b = [(f.name, f.type) if isinstance(f, Field) else tuple(f) for f in other]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"field {i + 1} is {x[0]}:{x[1]}, not {y[0]}:{y[1]}"
    return f"{len(a)} fields, not {len(b)}"


#: the layout of raw records when neither --layout nor the dataset gives one
DEFAULT_LAYOUT = "scidb96"


def available_layouts() -> list[str]:
    names = set()
    for d in [*_search_dirs(), builtin_schema_dir()]:
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    load_plugins()
    names.update(_REGISTERED)
    return sorted(names)


def get_layout(name_or_path: str | Layout) -> Layout:
    """Find a layout by name or by path to its .toml file."""
    if isinstance(name_or_path, Layout) or getattr(name_or_path, "variable_length", False):
        return name_or_path
    ref = str(name_or_path)
    if ref in _REGISTERED:  # a plug-in's layout, e.g. the documents' docs
        return _REGISTERED[ref]
    if ref.endswith(".toml") or os.sep in ref:
        p = Path(ref)
        if not p.is_file():
            raise UnknownLayoutError(f"layout file {ref} does not exist")
        return parse_layout_toml(read_toml_text(p, LayoutError), str(p))
    return _get_named(ref, tuple(str(d) for d in _search_dirs()))


@functools.lru_cache(maxsize=None)
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

