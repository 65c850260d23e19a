"""`_lmdbnode.buffer_offset` (C): where a zero-copy value lies in the map of data.mdb is
the address of its buffer's first byte minus the map's base, asked through the buffer
protocol (PyObject_GetBuffer) - not read out of CPython's memoryview object through
ctypes, which depended on that object's layout. It must give the address numpy sees for
every kind of buffer the stores hand around, and refuse what has none."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from loader.stores._lmdbnode import buffer_offset


def _address(obj) -> int:
    """The address of the first element of ``obj``'s buffer, as numpy sees it."""
    return np.asarray(memoryview(obj)).__array_interface__["data"][0]


def _buffers():
    raw = bytearray(range(256)) * 16
    mv = memoryview(raw)
    m = mmap.mmap(-1, 8192)
    return {
        "bytes": b"0123456789" * 10,
        "bytearray": raw,
        "memoryview": mv,
        "slice": mv[1000:2000],
        "read-only slice": mv[7:4000].toreadonly(),
        "strided": mv[3::5],
        "reversed": mv[::-1],
        "2-d": mv.cast("B", (64, 64)),
        "numpy": np.arange(100, dtype=np.int64)[10:],
        "mmap": m,
        "mmap slice": memoryview(m)[4096:],
    }


@pytest.mark.parametrize("kind", list(_buffers()))
def test_buffer_offset_is_the_address_of_any_buffers_first_byte(kind):
    obj = _buffers()[kind]
    address = _address(obj)
    assert buffer_offset(obj) == address
    assert buffer_offset(obj, 0) == address
    assert buffer_offset(obj, address) == 0
    assert buffer_offset(obj, address - 4096) == 4096
    assert buffer_offset(obj, address + 100) == -100  # a buffer below the base: negative
    top = 2**64 - 1  # a base beyond any int64 difference: still exact
    assert buffer_offset(obj, top) == address - top


def test_buffer_offset_of_a_slice_is_its_offset_in_the_whole():
    raw = bytearray(1 << 16)
    base = buffer_offset(raw)
    mv = memoryview(raw)
    for lo in (0, 1, 4095, 4096, 65535):
        assert buffer_offset(mv[lo:], base) == lo
        assert buffer_offset(mv[lo:].toreadonly(), base) == lo


def test_buffer_offset_refuses_what_has_no_buffer():
    with pytest.raises(TypeError):
        buffer_offset(12345)
    with pytest.raises(TypeError):
        buffer_offset("text")
    mv = memoryview(bytearray(10))
    mv.release()
    with pytest.raises(ValueError):
        buffer_offset(mv)
    with pytest.raises(OverflowError):
        buffer_offset(b"x", -1)
    with pytest.raises(TypeError):
        buffer_offset()
    with pytest.raises(TypeError):
        buffer_offset(b"x", 0, 0)
