"""The sqlite sink: the side effect of processing outside Kafka, one row per processed record
(notebooks 03 and 05; the consumer worker and the exactly-once processor write it).
Source: sqlite.org (WAL, PRAGMA synchronous, UPSERT)."""

from __future__ import annotations

import os
import sqlite3
import time


#: How a ``Sink`` treats a record id it already holds: ``insert`` a second row, ``ignore``
#: the repeat, or ``upsert`` (overwrite its row and count the write).
SINK_MODES = ("insert", "ignore", "upsert")


class Sink:
    """The side effect of processing, outside Kafka: one row per processed record in sqlite,
    table ``processed`` ``(record_id, topic, partition, offset, consumer, ts_ms, writes,
    payload)``: ``consumer`` is the worker's name, ``writes`` how often the row was written
    (``upsert`` counts rewrites), ``payload`` what processing produced (text, or None).

    Modes (``SINK_MODES``): ``insert`` keeps repeats as extra rows; ``ignore`` keys rows by
    record id and drops repeats (article 000's idea: deduplicate on the consumer by a key
    carried in the message); ``upsert`` keys them too and overwrites (INSERT ... ON CONFLICT
    DO UPDATE, article 002's fix: deduplicate in the store).

    WAL journal with ``synchronous=NORMAL``: a committed row survives the death of the
    process (it is in the OS page cache), only a power loss could take it back (sqlite.org,
    PRAGMA synchronous), and no fsync per row keeps the side effect from dominating timings.

    Raises:
        ValueError: unknown ``mode``.
    """

    def __init__(self, path: str, mode: str = "insert"):
        if mode not in SINK_MODES:
            raise ValueError(f"sink mode must be one of {', '.join(SINK_MODES)}, not {mode!r}")
        self.mode = mode
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        pk = "" if mode == "insert" else "PRIMARY KEY"
        self.db.execute(f"CREATE TABLE IF NOT EXISTS processed (record_id TEXT {pk}, topic TEXT, partition INTEGER, "
                        "offset INTEGER, consumer TEXT, ts_ms INTEGER, writes INTEGER, payload TEXT)")
        if mode == "upsert":
            self.sql = ("INSERT INTO processed VALUES (?, ?, ?, ?, ?, ?, 1, ?) ON CONFLICT(record_id) DO UPDATE SET "
                        "topic=excluded.topic, partition=excluded.partition, offset=excluded.offset, "
                        "consumer=excluded.consumer, ts_ms=excluded.ts_ms, payload=excluded.payload, writes=writes+1")
        else:
            verb = "INSERT OR IGNORE" if mode == "ignore" else "INSERT"
            self.sql = f"{verb} INTO processed VALUES (?, ?, ?, ?, ?, ?, 1, ?)"

    def write(self, record_id: str, topic: str, partition: int, offset: int, consumer: str,
              payload: str | None = None) -> bool:
        """Write one row (its own sqlite transaction); returns False if ``ignore`` dropped it
        as a repeat."""
        cur = self.db.execute(self.sql, (record_id, topic, partition, offset, consumer, int(time.time() * 1000), payload))
        return cur.rowcount == 1

    def write_batch(self, rows: list[tuple[str, str, int, int, str, str | None]]) -> None:
        """Write ``(record_id, topic, partition, offset, consumer, payload)`` rows in one
        sqlite transaction."""
        ts = int(time.time() * 1000)
        self.db.execute("BEGIN")
        self.db.executemany(self.sql, [(r, t, p, o, c, ts, payload) for r, t, p, o, c, payload in rows])
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close the sqlite connection."""
        self.db.close()


def sink_rows(path: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """``(record_id, writes)`` of every row of a ``Sink`` file (``writes`` > 1 only for
    ``upsert``: how often a replay rewrote the row)."""
    db = sqlite3.connect(str(path))
    try:
        return [(r, int(w)) for r, w in db.execute("SELECT record_id, writes FROM processed")]
    finally:
        db.close()
