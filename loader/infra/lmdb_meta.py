"""LMDB 0.9's meta pages, read without LMDB (the checks made before a data.mdb is mapped:
stores/lmdb_files.py for a shard, model/catalog.py for the catalog).

The two meta pages are pages 0 and 1 of data.mdb (64-bit): a 16-byte page header (pgno
u64, pad u16, flags u16 with P_META = 0x08, lower, upper) then MDB_meta: magic u32,
version u32, address, mapsize, two MDB_db of 48 bytes (the first one's leading u32 is the
page size), last_pg u64 (the last page in use), txnid u64. LMDB uses the meta with the
larger txnid; every page up to its last_pg must be in the file."""

from __future__ import annotations

import os
import struct

#: a meta page's fields: pgno, pad, flags, magic, version, page size, last_pg, txnid
META = struct.Struct("<QHH4xII16xI44x48xQQ")
MAGIC, VERSION, P_META = 0xBEEFC0DE, 1, 0x08


def valid_page_size(psize: int) -> bool:
    """Whether a meta page's page size is one LMDB could have written."""
    return psize >= 512 and not psize & (psize - 1)


def read_meta_pages(fd: int) -> tuple[bytes, bytes, int]:
    """(page 0's meta bytes, page 1's - b"" when page 0 gives no valid page size; either
    may be short - and the file's size), in that order: a writer's commit meanwhile only
    grows the file (LMDB writes its pages before the meta page that points to them), while
    a size taken first may predate a commit whose meta page is then read - a reader
    descheduled between the calls called a healthy file truncated
    (tests/stores/test_lmdb_checks_during_commits.py)."""
    head = os.pread(fd, META.size, 0)
    psize = META.unpack(head)[5] if len(head) == META.size else 0
    second = os.pread(fd, META.size, psize) if valid_page_size(psize) else b""
    return head, second, os.fstat(fd).st_size
