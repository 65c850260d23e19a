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

import typing
from typing import Any, ClassVar

import msgspec


class JsonObject:
    """Base of the typed, order-keeping JSON objects (see the module docstring)."""

    _fields: ClassVar[dict[str, Any]] = {}
    _nested: ClassVar[dict[str, type[JsonObject]]] = {}  # fields holding a list of JsonObjects
    _shape: ClassVar[type | None] = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        hints = typing.get_type_hints(cls)
        cls._fields = {name: t for name, t in hints.items() if not name.startswith("_")}
        cls._nested = {name: _list_item(t) for name, t in cls._fields.items() if _list_item(t) is not None}
        cls._shape = None

    def __init__(self, **fields):
        for name, value in fields.items():
            setattr(self, name, value)

    # --- like a dict, typed ------------------------------------------------------------
    def __setattr__(self, name: str, value) -> None:
        if name not in self._fields:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        self.__dict__[name] = value

    def update(self, **fields) -> None:
        """Set these fields in this order (new ones are added at the end)."""
        for name, value in fields.items():
            setattr(self, name, value)

    def has(self, name: str) -> bool:
        return name in self.__dict__

    def drop(self, name: str) -> None:
        """Remove the key (absent: nothing to do)."""
        self.__dict__.pop(name, None)

    def copy(self):
        """A shallow copy (the values are shared, as ``dict(d)`` shares them)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__!r})"

    # --- JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON object: every key present, in order."""
        d = dict(self.__dict__)
        for name in self._nested:
            if name in d:
                d[name] = [item.to_dict() for item in d[name]]
        return d

    @classmethod
    def from_dict(cls, d: dict):
        """The object of a decoded JSON object that `shape()` accepts (checked first)."""
        obj = object.__new__(cls)
        obj.__dict__.update(d)
        for name, item in cls._nested.items():
            if name in d:
                obj.__dict__[name] = [item.from_dict(x) for x in d[name]]
        return obj

    @classmethod
    def shape(cls) -> type:
        """The msgspec Struct that validates the JSON object: required fields, types of the
        others when present (null only where the annotation allows it), unknown keys accepted."""
        if cls._shape is None:
            spec = []
            for name, t in cls._fields.items():
                if name in cls._nested:
                    t = list[cls._nested[name].shape()]
                spec.append((name, t) if not hasattr(cls, name) else (name, t, None))
            cls._shape = msgspec.defstruct(f"{cls.__name__}Shape", spec, kw_only=True)
        return cls._shape


def _list_item(t) -> type[JsonObject] | None:
    """X of a ``list[X]`` annotation where X is a JsonObject, else None."""
    args = typing.get_args(t)
    if typing.get_origin(t) is list and args and isinstance(args[0], type) and issubclass(args[0], JsonObject):
        return args[0]
    return None
