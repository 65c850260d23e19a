"""The type of a bytes-like value that crosses stages: what a serializer encodes and a
store writes (annotations only; nothing here exists at run time).

`BytesLike` is any object with the buffer protocol and a length: bytes, bytearray, a
memoryview of bytes, a pyarrow Buffer (an Arrow batch's value). numpy arrays are not:
numpy's stubs give ``ndarray`` the buffer protocol only from Python 3.12, so an array is
passed as its ``.data`` memoryview.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing_extensions import Buffer

    class BytesLike(Buffer, Sized, Protocol):
        """A buffer with a length in bytes (see the module)."""
