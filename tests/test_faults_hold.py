"""kafkalab.faults ``hold_request``: a request kept from the broker until the harness releases
it, then written to the broker late (the client gone) and the broker's answer decoded. Against
a fake broker on free local ports (no Kafka): the proxy's bytes, not Kafka's behaviour."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from kafkalab.faults import ACTIONS, RESPONSE_ACTIONS, FaultProxy, Rule
from kafkalab.protocol import FrameReader, encode_frame

from test_protocol_txn import end_txn_request, end_txn_response

# The fake broker, the proxy and its control socket listen on loopback.
pytestmark = pytest.mark.socket


def _free_base() -> int:
    """A port base whose broker-1 FAULT (base+3) and proxy (base+4) ports are free."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1] - 3
        if base < 20000 or base > 60000:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", base + 3))
                b.bind(("127.0.0.1", base + 4))
            return base
        except OSError:
            continue
    pytest.skip("no two free adjacent ports")


class FakeBroker:
    """Accepts connections on ``port``; answers every EndTxn frame with ``error``, in the request's version."""

    def __init__(self, port: int, error: int):
        self.error = error
        self.received: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        frames = FrameReader()
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for payload in frames.feed(data):
                    self.received.append(payload)
                    version, corr = struct.unpack_from(">hi", payload, 2)
                    conn.sendall(encode_frame(end_txn_response(version, self.error, pid=7, epoch=4, corr=corr)))

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def proxied(monkeypatch):
    base = _free_base()
    monkeypatch.setenv("KAFKALAB_PORT_BASE", str(base))
    broker = FakeBroker(base + 3, error=0)
    proxy = FaultProxy(brokers=[1]).start()
    try:
        yield proxy, broker, base + 4
    finally:
        proxy.stop()
        broker.close()


def test_hold_request_is_an_action_on_the_request() -> None:
    assert "hold_request" in ACTIONS and "hold_request" not in RESPONSE_ACTIONS
    assert Rule("hold_request", api="EndTxn", times=1).name == "hold_request EndTxn 1x"


def test_a_held_end_txn_reaches_the_broker_only_when_released_after_the_client_left(proxied) -> None:
    proxy, broker, port = proxied
    proxy.add_rule(Rule("hold_request", api="EndTxn", times=1))
    first = end_txn_request(1, "txn-a", 4001, 0, True, corr=11)
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(encode_frame(first))
        held = proxy.wait_for_held(1, timeout_s=10)
        assert broker.received == [], "a held request does not reach the broker"
        assert held[0].txn.committed is True and held[0].txn.producer_epoch == 0 and held[0].client_closed_ms is None
        # the retry: the rule held once, so the next EndTxn goes through and is answered
        client.sendall(encode_frame(end_txn_request(1, "txn-a", 4001, 0, True, corr=12)))
        got = FrameReader()
        answers: list[bytes] = []
        while not answers:
            answers = got.feed(client.recv(65536))
        assert struct.unpack_from(">i", answers[0])[0] == 12, "only the retry is answered"
    held = proxy.wait_for_held(1, timeout_s=10, client_closed=True)
    assert held[0].client_closed_ms is not None and not held[0].released
    broker.error = 48  # INVALID_TXN_STATE, say
    released = proxy.release_held(timeout_s=10)
    assert len(released) == 1 and released[0].released
    assert broker.received[-1] == first, "the held frame reaches the broker byte for byte, late"
    assert released[0].answer_error_code == 48 and released[0].answer.error == "INVALID_TXN_STATE"
    actions = [(e.kind, e.action, e.correlation_id) for e in proxy.events(api="EndTxn")]
    assert actions == [("request", "held", 11), ("request", "forwarded", 12), ("response", "forwarded", 12),
                       ("request", "released", 11), ("response", "released", 11)]
    assert proxy.events(api="EndTxn", kind="response")[-1].error_code == 48
    assert proxy.stats("EndTxn")["held_requests"] == 1
    assert proxy.release_held() == [], "nothing left to release"
    assert "payload" not in released[0].to_json() and released[0].to_json()["answer"]["error"] == "INVALID_TXN_STATE"


def test_the_control_socket_holds_and_releases_like_the_fault_hold_and_release_commands(monkeypatch, tmp_path) -> None:
    from kafkalab.faults_cli import send_control

    base = _free_base()
    monkeypatch.setenv("KAFKALAB_PORT_BASE", str(base))
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    broker = FakeBroker(base + 3, error=90)  # PRODUCER_FENCED, say
    proxy = FaultProxy(brokers=[1], control_socket=tmp_path / "faults" / "control.sock").start()
    try:
        # the fault commands find the socket here: under $KAFKALAB_STATE
        monkeypatch.setattr("kafkalab.faults_cli.control_socket_path", lambda: tmp_path / "faults" / "control.sock")
        send_control({"op": "add", "rule": Rule("hold_request", api="EndTxn", times=1).to_json()})
        with socket.create_connection(("127.0.0.1", base + 4)) as client:
            client.sendall(encode_frame(end_txn_request(5, "txn-z", 7, 3, False, corr=21)))
            proxy.wait_for_held(1, timeout_s=10)
        held = send_control({"op": "held"})["held"]
        assert [(h["api"], h["txn"]["committed"], h["released_ms"]) for h in held] == [("EndTxn", False, None)]
        released = send_control({"op": "release", "timeout_s": 10}, timeout_s=15)["released"]
        assert len(released) == 1 and released[0]["answer"]["error"] == "PRODUCER_FENCED"
        assert send_control({"op": "release"})["released"] == [], "a request is released once"

        from click.testing import CliRunner

        from kafkalab.faults_cli import cli_group

        assert "nothing was held" in CliRunner().invoke(cli_group, ["release"]).output
        r = CliRunner().invoke(cli_group, ["hold", "--api", "EndTxn"])
        assert r.exit_code == 0 and "added rule: hold_request EndTxn 1x" in r.output, r.output
        with socket.create_connection(("127.0.0.1", base + 4)) as client:
            client.sendall(encode_frame(end_txn_request(1, "txn-y", 8, 0, True, corr=5)))
            proxy.wait_for_held(1, timeout_s=10)
        r = CliRunner().invoke(cli_group, ["release", "--timeout", "10"])
        assert r.exit_code == 0 and "EndTxn v1" in r.output and "epoch 0" in r.output \
            and "broker answered PRODUCER_FENCED" in r.output, r.output
    finally:
        proxy.stop()
        broker.close()
