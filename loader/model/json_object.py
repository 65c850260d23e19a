"""Typed JSON objects of the manifest whose keys keep their order: runs and garbage entries.

A run record grows key by key as its run goes (its plan, its pending batches, its figures
when it is done), and the order of its keys on disk is the order in which they were first
written, which depends on the path the run took: a resumed run has ``attempts`` before
``seconds``, documents skipped while planning come before ``table`` and those the workers
found after ``error``. A class with one fixed field order would reorder the keys of every
run it rewrites. So a `JsonObject` holds exactly the keys present, in the order they were
first set, in its instance ``__dict__``:

- the fields are the class's annotations: the type a value must have when present;
  fields without a class default are required, the others may be absent, and reading an
  absent one gives its class default, None (like ``dict.get``);
- setting a field adds it at the end if it is new, else replaces its value in place (like
  ``d[k] = v``); only declared fields can be set: a typo is an AttributeError, never a
  new key on disk. `drop` removes a key (``dict.pop``), `has` tells whether it is there;
- keys written by a newer version that this one does not know are kept where they are
  and written back (as the manifest keeps its own unknown keys);
- `to_dict()` is the JSON object, `from_dict()` builds one from a decoded JSON object
  that `shape()` (a msgspec Struct of the declared fields) has validated:
  model/manifest_check.py checks a whole manifest against it before anything is built.

Pure data: no I/O, nothing to crash.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, TypeVar

import msgspec

T = TypeVar("T")


class _NotNull:
    """Marks a field that may be absent but is never null when present (`Absent`)."""


#: a field that may be absent (reads as None) but is never null when present: the type a
#: checker sees is ``T | None``, the shape validates a present value as ``T``
Absent = Annotated[T | None, _NotNull]

#: a decoded JSON object
JsonDict = dict[str, Any]


class JsonObject:
    """Base of the typed, order-keeping JSON objects (see the module docstring)."""

    _fields: ClassVar[dict[str, Any]] = {}  # name -> the type a present value must have
    _nested: ClassVar[dict[str, type[JsonObject]]] = {}  # fields holding a list of JsonObjects
    _shape: ClassVar[type | None] = None
    #: the tag (value of `_tag_field`) of this class in a tagged union of shapes, if any
    _tag: ClassVar[str | None] = None
    _tag_field: ClassVar[str] = "kind"
    #: on the base class of several kinds (runs, garbage entries): tag -> the kind's class
    _by_tag: ClassVar[Mapping[str, type[JsonObject]]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        hints = typing.get_type_hints(cls, include_extras=True)
        cls._fields = {name: _shape_type(t) for name, t in hints.items() if not name.startswith("_")}
        cls._nested = {}
        for name, t in cls._fields.items():
            item = _list_item(t)
            if item is not None:
                cls._nested[name] = item
        cls._shape = None

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)

    # --- like a dict, typed ------------------------------------------------------------
    def __setattr__(self, name: str, value: object) -> None:
        if name not in self._fields:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        self.__dict__[name] = value

    def update(self, **fields: Any) -> None:
        """Set these fields in this order (new ones are added at the end)."""
        for name, value in fields.items():
            setattr(self, name, value)

    def has(self, name: str) -> bool:
        return name in self.__dict__

    def drop(self, name: str) -> None:
        """Remove the key (absent: nothing to do)."""
        self.__dict__.pop(name, None)

    def copy(self) -> Self:
        """A shallow copy (the values are shared, as ``dict(d)`` shares them)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    # mutable: unhashable, as a dict (defining __eq__ sets __hash__ to None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__!r})"

    # --- JSON --------------------------------------------------------------------------
    def to_dict(self) -> JsonDict:
        """The JSON object: every key present, in order."""
        d = dict(self.__dict__)
        for name in self._nested:
            if name in d:
                d[name] = [item.to_dict() for item in d[name]]
        return d

    @classmethod
    def from_dict(cls, d: JsonDict) -> Self:
        """The object of a decoded JSON object that `shape()` accepts (checked first)."""
        klass = cls.class_of(d)
        obj = object.__new__(klass)
        obj.__dict__.update(d)
        for name, item in klass._nested.items():
            if name in d:
                obj.__dict__[name] = [item.from_dict(x) for x in d[name]]
        return obj

    @classmethod
    def class_of(cls, d: JsonDict) -> type[Self]:
        """The class of the object `from_dict` builds of ``d``: this one, or - this class
        being the base of several kinds (`_by_tag`) - the class of ``d``'s kind, if known."""
        tag = d.get(cls._tag_field) if "_by_tag" in cls.__dict__ else None
        found = cls._by_tag.get(tag) if isinstance(tag, str) else None
        # a subclass of cls (registered in its _by_tag), which is Self here: mypy cannot tie the two
        return cls if found is None else found  # type: ignore[return-value]

    @classmethod
    def shape(cls) -> type[msgspec.Struct]:
        """The msgspec Struct that validates the JSON object: required fields, types of the
        others when present (null only where the annotation allows it: not for `Absent`
        fields), unknown keys accepted. A class with a `_tag` gives a tagged Struct (its
        tag field left out of the fields): a member of a tagged union of shapes."""
        if cls._shape is None:
            spec: list[tuple[str, Any] | tuple[str, Any, Any]] = []
            for name, t in cls._fields.items():
                if cls._tag is not None and name == cls._tag_field:
                    continue
                if name in cls._nested:
                    t = types.GenericAlias(list, cls._nested[name].shape())
                spec.append((name, t) if not hasattr(cls, name) else (name, t, None))
            name = f"{cls.__name__}Shape"
            if cls._tag is None:
                cls._shape = msgspec.defstruct(name, spec, kw_only=True)
            else:
                cls._shape = msgspec.defstruct(name, spec, kw_only=True, tag_field=cls._tag_field, tag=cls._tag)
        return cls._shape


def _shape_type(t: Any) -> Any:
    """The type a present value must have: ``T`` of an `Absent` field, else the annotation."""
    if typing.get_origin(t) is Annotated:
        inner, *extra = typing.get_args(t)
        if _NotNull in extra:
            return typing.Union[tuple(a for a in typing.get_args(inner) if a is not type(None))]  # noqa: UP007
        return inner
    return t


def _list_item(t: Any) -> type[JsonObject] | None:
    """X of a ``list[X]`` annotation where X is a JsonObject, else None."""
    args = typing.get_args(t)
    if typing.get_origin(t) is list and args and isinstance(args[0], type) and issubclass(args[0], JsonObject):
        return args[0]
    return None
