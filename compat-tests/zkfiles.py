"""Reading Apache ZooKeeper's txn log files independently of Warden, for tests and benchmarks
that must judge Warden's import by ZooKeeper's own files (no dependency beyond the stdlib).

The format, from ZooKeeper's FileTxnLog: a 16-byte header (magic "ZKLG", int version, long
dbid), then per entry a long Adler-32 of the txn, an int length, the txn (its TxnHeader: long
clientId, int cxid, long zxid, ...) and the byte 'B'; a zero length ends the file (the rest is
preallocated zeros), and so does a bad checksum or a cut-short entry.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def txn_log_last_zxid(path: Path) -> tuple[int, int]:
    """(zxid of the last complete, checksummed entry, number of such entries) of one log file;
    (-1, 0) for a file that is not a ZooKeeper txn log or holds no entry."""
    data = Path(path).read_bytes()
    last, entries = -1, 0
    if len(data) < 16 or data[:4] != b"ZKLG":
        return last, 0
    off = 16
    while off + 12 <= len(data):
        crc, n = struct.unpack_from(">qi", data, off)
        end = off + 12 + n
        if n <= 0 or end + 1 > len(data) or data[end] != 0x42:
            break
        txn = data[off + 12:end]
        if zlib.adler32(txn) != crc & 0xFFFFFFFF:
            break
        last = struct.unpack_from(">q", txn, 12)[0]
        entries += 1
        off = end + 1
    return last, entries


def data_dir_last_zxid(data_dir: str | Path) -> int:
    """The highest zxid of a complete entry in a data dir's `version-2/log.*` files (-1: none)."""
    return max((txn_log_last_zxid(f)[0] for f in Path(data_dir, "version-2").glob("log.*")), default=-1)
