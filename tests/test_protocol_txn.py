"""kafkalab.protocol: EndTxn and AddPartitionsToTxn requests and responses (v0-v5), on frames
built here field by field from the message schemas (apache/kafka
clients/src/main/resources/common/message ``EndTxnRequest.json``, ``EndTxnResponse.json``,
``AddPartitionsToTxnRequest.json``, ``AddPartitionsToTxnResponse.json``). Pure: no Kafka."""

from __future__ import annotations

import struct

import pytest

from kafkalab.protocol import (ProtocolError, encode_uvarint, parse_request_header, parse_txn_request,
                               parse_txn_response)

END_TXN, ADD_PARTITIONS = 26, 24


def _str(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else struct.pack(">h", -1)
    b = s.encode()
    return (encode_uvarint(len(b) + 1) if flexible else struct.pack(">h", len(b))) + b


def _array(n: int, flexible: bool) -> bytes:
    return encode_uvarint(n + 1) if flexible else struct.pack(">i", n)


def _header(api: int, version: int, corr: int, client: str, flexible: bool) -> bytes:
    # request header v1 (v2 adds tagged fields after the client id); client_id stays an int16 string
    return struct.pack(">hhi", api, version, corr) + _str(client, False) + (b"\x00" if flexible else b"")


def end_txn_request(version: int, txn: str, pid: int, epoch: int, committed: bool, corr: int = 7) -> bytes:
    flex = version >= 3
    body = _str(txn, flex) + struct.pack(">qh?", pid, epoch, committed) + (b"\x00" if flex else b"")
    return _header(END_TXN, version, corr, "rdkafka", flex) + body


def end_txn_response(version: int, error: int, pid: int = -1, epoch: int = -1, corr: int = 7) -> bytes:
    flex = version >= 3
    out = struct.pack(">i", corr) + (b"\x00" if flex else b"") + struct.pack(">ih", 0, error)
    if version >= 5:
        out += struct.pack(">qh", pid, epoch)
    return out + (b"\x00" if flex else b"")


def _topics(topics: dict[str, list[int]], flex: bool) -> bytes:
    out = _array(len(topics), flex)
    for name, parts in topics.items():
        out += _str(name, flex) + _array(len(parts), flex) + b"".join(struct.pack(">i", p) for p in parts)
        out += b"\x00" if flex else b""
    return out


def add_partitions_request(version: int, txn: str, pid: int, epoch: int, topics: dict[str, list[int]],
                           verify_only: bool = False) -> bytes:
    flex = version >= 3
    if version <= 3:
        body = _str(txn, flex) + struct.pack(">qh", pid, epoch) + _topics(topics, flex)
    else:
        body = _array(1, True) + _str(txn, True) + struct.pack(">qh?", pid, epoch, verify_only) + _topics(topics, True)
        body += b"\x00"
    return _header(ADD_PARTITIONS, version, 3, "rdkafka", flex) + body + (b"\x00" if flex else b"")


def _results(results: dict[str, list[tuple[int, int]]], flex: bool) -> bytes:
    out = _array(len(results), flex)
    for name, parts in results.items():
        out += _str(name, flex) + _array(len(parts), flex)
        for p, e in parts:
            out += struct.pack(">ih", p, e) + (b"\x00" if flex else b"")
        out += b"\x00" if flex else b""
    return out


def add_partitions_response(version: int, results: dict[str, list[tuple[int, int]]], top: int = 0,
                            txn: str = "t") -> bytes:
    flex = version >= 3
    out = struct.pack(">i", 3) + (b"\x00" if flex else b"") + struct.pack(">i", 0)
    if version <= 3:
        out += _results(results, flex)
    else:
        out += struct.pack(">h", top) + _array(1, True) + _str(txn, True) + _results(results, True) + b"\x00"
    return out + (b"\x00" if flex else b"")


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_request_names_the_transaction_producer_epoch_and_outcome(version: int, committed: bool) -> None:
    header, info = parse_txn_request(end_txn_request(version, "txn-a", 4001, 7, committed))
    assert (header.api, header.api_version, header.correlation_id, header.client_id) == ("EndTxn", version, 7, "rdkafka")
    assert (info.api, info.api_version, info.transactional_id, info.producer_id, info.producer_epoch, info.committed) \
        == ("EndTxn", version, "txn-a", 4001, 7, committed)
    assert info.partitions == () and info.transactions == 1


def test_the_request_header_of_a_flexible_end_txn_ends_after_its_tagged_fields() -> None:
    frame = end_txn_request(5, "x", 1, 2, True)
    _, pos = parse_request_header(frame)
    assert frame[pos:pos + 2] == b"\x02x", "the body starts with the compact string 'x' (length + 1 = 2)"
    _, pos_v1 = parse_request_header(end_txn_request(1, "x", 1, 2, True))
    assert end_txn_request(1, "x", 1, 2, True)[pos_v1:pos_v1 + 3] == b"\x00\x01x", "v0-v2: an int16 string"


@pytest.mark.parametrize("version, error", [(0, 0), (1, 47), (2, 90), (3, 48), (4, 0)])
def test_end_txn_response_before_v5_carries_only_the_error(version: int, error: int) -> None:
    info = parse_txn_response(end_txn_response(version, error), END_TXN, version)
    assert (info.api, info.api_version, info.error_code, info.producer_id, info.producer_epoch) == \
        ("EndTxn", version, error, -1, -1)


def test_end_txn_response_v5_returns_the_bumped_epoch_kip_890() -> None:
    info = parse_txn_response(end_txn_response(5, 0, pid=4001, epoch=8), END_TXN, 5)
    assert (info.error_code, info.error, info.producer_id, info.producer_epoch) == (0, "NONE", 4001, 8)
    assert parse_txn_response(end_txn_response(5, 90, 4001, 8), END_TXN, 5).error == "PRODUCER_FENCED"
    assert parse_txn_response(end_txn_response(1, 48), END_TXN, 1).error == "INVALID_TXN_STATE"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_request_of_a_client_lists_the_partitions(version: int) -> None:
    header, info = parse_txn_request(add_partitions_request(version, "txn-b", 9, 3, {"t1": [0, 2], "t2": [1]}))
    assert header.api == "AddPartitionsToTxn" and header.api_version == version
    assert (info.transactional_id, info.producer_id, info.producer_epoch, info.committed) == ("txn-b", 9, 3, None)
    assert info.partitions == (("t1", 0), ("t1", 2), ("t2", 1))
    assert info.verify_only is False and info.transactions == 1


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_request_v4_plus_is_the_batched_broker_form(version: int) -> None:
    _, info = parse_txn_request(add_partitions_request(version, "txn-c", 11, 0, {"t": [5]}, verify_only=True))
    assert (info.transactional_id, info.producer_id, info.producer_epoch) == ("txn-c", 11, 0)
    assert info.partitions == (("t", 5),) and info.verify_only is True and info.transactions == 1


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_response_reports_the_first_partition_error(version: int) -> None:
    ok = parse_txn_response(add_partitions_response(version, {"t": [(0, 0), (1, 0)]}), ADD_PARTITIONS, version)
    assert ok.error_code == 0 and ok.partition_errors == (("t", 0, 0), ("t", 1, 0))
    bad = parse_txn_response(add_partitions_response(version, {"t": [(0, 0), (1, 48)]}), ADD_PARTITIONS, version)
    assert bad.error_code == 48 and bad.error == "INVALID_TXN_STATE"


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_response_v4_plus_has_a_top_level_error(version: int) -> None:
    top = parse_txn_response(add_partitions_response(version, {}, top=47), ADD_PARTITIONS, version)
    assert top.error_code == 47 and top.partition_errors == ()
    part = parse_txn_response(add_partitions_response(version, {"t": [(3, 90)]}), ADD_PARTITIONS, version)
    assert part.error_code == 90 and part.partition_errors == (("t", 3, 90),)


def test_txn_parsers_refuse_other_apis_and_truncated_frames() -> None:
    produce = struct.pack(">hhi", 0, 9, 1) + _str("c", False) + b"\x00"
    with pytest.raises(ProtocolError, match="neither EndTxn"):
        parse_txn_request(produce)
    with pytest.raises(ProtocolError, match="neither EndTxn"):
        parse_txn_response(end_txn_response(1, 0), 0, 1)
    with pytest.raises(ProtocolError):
        parse_txn_request(end_txn_request(1, "txn", 1, 2, True)[:-3])
    with pytest.raises(ProtocolError):
        parse_txn_response(end_txn_response(5, 0, 1, 2)[:-2], END_TXN, 5)
