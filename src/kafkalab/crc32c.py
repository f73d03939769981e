"""CRC-32C (Castagnoli), the checksum of a record batch v2: ``crc32c`` a byte at a time (the
reference) and ``crc32c_many`` (numpy, many buffers at once, about 20 times faster on a segment
of many batches). ``kafkalab.segments`` checks every batch it reads with them.

Sources: KIP-98 (record batch v2 carries a CRC-32C of everything after its CRC field); Kafka
clients ``org.apache.kafka.common.utils.Crc32C``; RFC 3720 appendix B.4 (the test vectors).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

#: CRC-32C (Castagnoli) polynomial, bit-reflected, as used by record batch v2 (KIP-98;
#: ``org.apache.kafka.common.utils.Crc32C``, which wraps ``java.util.zip.CRC32C``).
CRC32C_POLY = 0x82F63B78


def _crc_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C of ``data`` (initial value and final XOR 0xFFFFFFFF): ``crc32c(b"123456789")``
    is ``0xE3069283``. Pure Python, a byte at a time: the reference for ``crc32c_many``."""
    crc = 0xFFFFFFFF
    t = _CRC_TABLE
    for b in bytes(data):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _zero_shift(x: int) -> int:
    """The CRC register after one zero byte, from register ``x`` (no initial or final XOR)."""
    return _CRC_TABLE[x & 0xFF] ^ (x >> 8)


def _apply(op: tuple[int, ...], x: int) -> int:
    """Apply a GF(2)-linear map on 32-bit registers, given by the images of the 32 unit vectors."""
    out = 0
    i = 0
    while x:
        if x & 1:
            out ^= op[i]
        x >>= 1
        i += 1
    return out


@lru_cache(maxsize=64)
def _zeros_operator(n: int) -> tuple[int, ...]:
    """The linear map "run the CRC register over ``n`` zero bytes", by repeated squaring."""
    if n == 0:
        return tuple(1 << i for i in range(32))
    if n == 1:
        return tuple(_zero_shift(1 << i) for i in range(32))
    half = _zeros_operator(n // 2)
    op = tuple(_apply(half, half[i]) for i in range(32))
    if n % 2:
        one = _zeros_operator(1)
        op = tuple(_apply(one, v) for v in op)
    return op


@lru_cache(maxsize=4096)
def _init_after(n: int) -> int:
    """Where the initial register 0xFFFFFFFF ends up after ``n`` zero bytes."""
    return _apply(_zeros_operator(n), 0xFFFFFFFF)


#: Bytes per lane in ``crc32c_many``.
_LANE = 128


@lru_cache(maxsize=1)
def _lane_tables() -> tuple[tuple[int, ...], ...]:
    """Four 256-entry tables applying "``_LANE`` zero bytes" to a register one byte at a time."""
    op = _zeros_operator(_LANE)
    return tuple(tuple(_apply(op, b << (8 * k)) for b in range(256)) for k in range(4))


def crc32c_many(buffers: Sequence[bytes | bytearray | memoryview]) -> list[int]:
    """CRC-32C of each buffer, the same values as ``crc32c`` but about 20 times faster on
    segments of many batches (numpy).

    How: CRC is linear over GF(2). Each buffer is left-padded with zeros to a multiple of
    ``_LANE`` bytes and cut into lanes; numpy runs the byte-at-a-time table update on every
    lane of every buffer at once (leading zeros leave a zero register unchanged), then the
    lanes of a buffer are folded in order with a precomputed "shift by ``_LANE`` zero bytes"
    table, and the initial value's contribution (0xFFFFFFFF run over ``len`` zero bytes) is
    XORed in. Same technique as zlib's ``crc32_combine``.
    """
    import numpy as np

    views = [memoryview(b).cast("B") for b in buffers]
    if not views:
        return []
    lanes = [(len(v) + _LANE - 1) // _LANE for v in views]
    total = sum(lanes)
    out: list[int] = []
    if total == 0:
        return [0 for _ in views]
    grid = np.zeros((total, _LANE), dtype=np.uint8)
    row = 0
    for v, k in zip(views, lanes):
        if k:
            flat = grid[row:row + k].reshape(-1)
            flat[k * _LANE - len(v):] = np.frombuffer(v, dtype=np.uint8)
            row += k
    cols = np.ascontiguousarray(grid.T)
    table = np.array(_CRC_TABLE, dtype=np.uint32)
    reg = np.zeros(total, dtype=np.uint32)
    for j in range(_LANE):
        reg = table[(reg ^ cols[j]) & 0xFF] ^ (reg >> 8)
    regs = reg.tolist()
    t0, t1, t2, t3 = _lane_tables()
    row = 0
    for v, k in zip(views, lanes):
        s = 0
        for c in regs[row:row + k]:
            s = t0[s & 0xFF] ^ t1[(s >> 8) & 0xFF] ^ t2[(s >> 16) & 0xFF] ^ t3[s >> 24] ^ c
        row += k
        out.append((s ^ _init_after(len(v))) ^ 0xFFFFFFFF)
    return out
