"""The fault proxy: a Kafka-protocol-aware TCP proxy between clients and brokers.

Each broker binds a FAULT listener (127.0.0.1:9095/9195/9295) and *advertises* it at the
proxy ports (9096/9196/9296, ``config.Node.fault_proxy_port``). ``FaultProxy`` listens on
the proxy ports and forwards to the FAULT listeners, so a client bootstrapped on
``config.Topology().fault_bootstrap_servers`` reaches every broker through the proxy (the
metadata it receives lists the proxy ports), while replication between brokers uses the
INTERNAL listener and is never touched.

The proxy reads the stream as Kafka frames with ``kafkalab.protocol`` (Kafka protocol guide,
"Network" and "Common Request and Response Structure"):

- a request is ``int32 size`` + header (``int16 api_key``, ``int16 api_version``,
  ``int32 correlation_id``, ``client_id`` nullable string, tagged fields in flexible
  versions) + body;
- a response is ``int32 size`` + ``int32 correlation_id`` (+ tagged fields in flexible
  versions) + body, and answers the request with the same correlation id on the same
  connection. A Produce request with ``acks=0`` gets no response at all.

Rules (``Rule``) decide per request, deterministically, by counting the requests that match
them: forward the request and drop its response (the broker wrote, the client never hears:
a *lost ack*), drop the request (the broker never sees it: a blackhole), delay the request or
its response, cut the connection before the request or at its response, or hold a request
until the harness releases it (``hold_request``, ``FaultProxy.release_held``: the late request
of KAFKA-17754, delivered after the client gave up on it). EndTxn and AddPartitionsToTxn
requests and responses are decoded (transactional id, producer id and epoch, commit or abort;
error code; the bumped epoch of EndTxn v5, KIP-890). Produce requests
and responses are parsed down to the record batch headers (producer id, producer epoch, base
sequence, record count; response error code and base offset), so the proxy can say how many
records a dropped response covered and whether the broker had appended them.

Usage (a notebook)::

    with FaultProxy() as proxy:
        proxy.add_rule(Rule("drop_response", api="Produce", times=2, every=2))
        ...  # a producer on proxy.bootstrap_servers
        proxy.stats()["lost_ack_records"]

and from a terminal, ``kafkalab fault serve`` plus ``kafkalab fault drop-acks ...``
(``kafkalab.faults_cli``: the commands talk to the serving proxy over its control socket).

Sources: Kafka protocol guide (kafka.apache.org/protocol, 4.3); message schemas
``RequestHeader.json``, ``ResponseHeader.json``, ``ProduceRequest.json`` (v3-v13; v9+ flexible;
v13 names topics by id, KIP-516) and ``ProduceResponse.json`` in apache/kafka
clients/src/main/resources/common/message; record batch v2 layout: Kafka documentation,
Implementation > Message Format.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import itertools
import json
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from . import config
from .errors import KafkalabError, PortInUse
from .protocol import (ADD_PARTITIONS_TO_TXN, END_TXN, PRODUCE, FrameReader, PartitionResult, ProduceRequestInfo,
                       ProtocolError, RequestHeader, TxnRequestInfo, TxnResponseInfo, api_key_of, api_name,
                       encode_frame, parse_produce_request, parse_produce_response, parse_request_header,
                       parse_txn_request, parse_txn_response, response_correlation_id)
from .waiting import wait_until

# ----------------------------------------------------------------------------- rules

#: What a rule does to the requests it applies to.
ACTIONS: dict[str, str] = {
    "drop_response": "forward the request, discard its response: the broker wrote, the client never hears",
    "drop_request": "discard the request: the broker never sees it and nothing answers (a blackhole)",
    "delay_request": "hold the request for delay_ms before forwarding it (later frames on the connection wait too)",
    "delay_response": "hold the response for delay_ms before passing it on",
    "cut": "close the connection instead of forwarding the request",
    "cut_at_response": "forward the request; when its response arrives, discard it and close the connection",
    "hold_request": ("keep the request from the broker until the harness releases it (FaultProxy.release_held): "
                     "then it is written to the broker, even after the client closed, and the answer is recorded"),
}
#: Seconds the proxy keeps reading a broker's answers to the requests a client left in flight
#: when it closed its connection (above the 30 s request.timeout.ms of the Java producer and
#: the 30 s request.timeout.ms of librdkafka's producer, CONFIGURATION.md: Kafka answers a
#: Produce request within the request's own timeout).
DRAIN_TIMEOUT_S = 35.0
#: Actions that act on the response, so they never apply to a request that gets none (acks=0).
RESPONSE_ACTIONS = frozenset({"drop_response", "delay_response", "cut_at_response"})


@dataclass
class Rule:
    """A deterministic fault: which requests it applies to, and what it does.

    A request *matches* when its api is ``api``, it reaches one of ``brokers`` (None: any)
    and, if ``client_id`` is set, comes from that ``client.id``. Matching requests are
    numbered 1, 2, 3... in the order the proxy reads them (over all connections of the
    brokers in scope). The rule lets the first ``skip`` pass, then applies to one in every
    ``every`` of the rest (the 1st after the skip, then the ``every+1``-th, ...), at most
    ``times`` times (None: without end).

    Example: with a producer that sends one record per request and waits for its ack,
    ``Rule("drop_response", times=3, every=2)`` loses the acks of requests 1, 3 and 5: each
    lost ack is followed by the retry (request 2, 4, 6), which gets through, so 3 different
    records lose their first ack.

    Args:
        action: one of ``ACTIONS``.
        api: api name or key (default ``"Produce"``).
        brokers: broker ids in scope, or None for all.
        client_id: only requests with this ``client.id`` (request header), or None.
        skip: matching requests let through before the rule starts.
        every: apply to one in ``every`` matching requests after the skip (>= 1).
        times: most applications, or None.
        delay_ms: for the delay actions, milliseconds.
        name: a label in the proxy's events (default: derived from the fields).

    Raises:
        KafkalabError: unknown action or api, ``every < 1``, negative ``skip``/``times``/``delay_ms``.
    """

    action: str
    api: str | int = "Produce"
    brokers: tuple[int, ...] | None = None
    client_id: str | None = None
    skip: int = 0
    every: int = 1
    times: int | None = None
    delay_ms: int = 0
    name: str = ""
    seen: int = field(default=0, init=False)
    applied: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise KafkalabError(f"unknown fault action {self.action!r}; choose one of {', '.join(ACTIONS)}")
        self.api_key = api_key_of(self.api)
        if self.brokers is not None:
            self.brokers = tuple(int(b) for b in self.brokers)
        if self.every < 1 or self.skip < 0 or (self.times is not None and self.times < 0) or self.delay_ms < 0:
            raise KafkalabError(f"rule needs every >= 1 and skip, times, delay_ms >= 0: {self!r}")
        if not self.name:  # e.g. "drop_response Produce broker 1 client p skip 1 every 2 3x"
            parts = [self.action, api_name(self.api_key),
                     self.brokers is not None and "broker " + ",".join(map(str, self.brokers)),
                     self.client_id and f"client {self.client_id}", self.skip and f"skip {self.skip}",
                     self.every != 1 and f"every {self.every}", self.times is not None and f"{self.times}x",
                     self.delay_ms and f"{self.delay_ms} ms"]
            self.name = " ".join(part for part in parts if part)

    def matches(self, api_key: int, broker: int, client_id: str | None, expects_response: bool = True) -> bool:
        """Whether a request is in the rule's scope (pure; does not count it)."""
        if api_key != self.api_key:
            return False
        if self.brokers is not None and broker not in self.brokers:
            return False
        if self.client_id is not None and client_id != self.client_id:
            return False
        return expects_response or self.action not in RESPONSE_ACTIONS

    def decide(self) -> bool:
        """Count one matching request and say whether the rule applies to it."""
        self.seen += 1
        n = self.seen - self.skip
        if n < 1 or (self.times is not None and self.applied >= self.times) or (n - 1) % self.every:
            return False
        self.applied += 1
        return True

    @property
    def exhausted(self) -> bool:
        """True once it applied ``times`` times (never for ``times=None``)."""
        return self.times is not None and self.applied >= self.times

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in (*_RULE_FIELDS, "seen", "applied")}
        d["brokers"] = list(self.brokers) if self.brokers is not None else None
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Rule":
        """Inverse of ``to_json`` for the fields a caller sets (counts start at 0)."""
        kw = {k: d[k] for k in _RULE_FIELDS if k in d and d[k] is not None}
        if "brokers" in kw:
            kw["brokers"] = tuple(kw["brokers"])
        return cls(**kw)


#: The fields of a ``Rule`` a caller sets (``to_json``, ``from_json``).
_RULE_FIELDS = ("action", "api", "brokers", "client_id", "skip", "every", "times", "delay_ms", "name")


class RuleBook:
    """The ordered rules of a proxy and the decision for one request (pure, thread-unsafe:
    ``FaultProxy`` calls it under its lock).

    For each request, rules are asked in the order they were added; every rule whose scope
    matches counts the request, until one applies: its action is the decision. A request
    no rule applies to is forwarded.
    """

    def __init__(self) -> None:
        self.rules: list[Rule] = []

    def add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def decide(self, api_key: int, broker: int, client_id: str | None, expects_response: bool) -> Rule | None:
        """The rule that applies to this request, or None (forward it)."""
        for rule in self.rules:
            if rule.matches(api_key, broker, client_id, expects_response) and rule.decide():
                return rule
        return None


# ----------------------------------------------------------------------------- events and counters


@dataclass
class ProxyEvent:
    """One thing the proxy saw or did.

    Attributes:
        t_ms: milliseconds since the proxy started (monotonic clock).
        wall_ms: wall clock, ms since the Unix epoch (to line up with ledgers).
        broker: broker id of the connection.
        conn: connection number (1, 2, ... per proxy).
        kind: ``"request"``, ``"response"``, ``"connect"`` or ``"close"``.
        api: api name (``"Produce"``...), or ``""`` for connect/close.
        api_version: version of the request (also for its response).
        correlation_id: the request's correlation id (-1 for connect/close).
        client_id: ``client.id`` of the request (also on its response).
        action: ``"forwarded"``, ``"dropped"``, ``"delayed"``, ``"cut"``, ``"held"`` (a
            ``hold_request`` rule took it), ``"released"`` (the held request written to the
            broker, and the broker's answer to it) (or ``"opened"``/``"closed"``).
        rule: name of the rule that caused the action, or None.
        acks: Produce ``acks`` (-1, 0, 1), or None.
        timeout_ms: Produce ``timeout_ms``: how long the leader may wait for its replicas
            (the client's ``request.timeout.ms``), or None.
        batches: Produce request batches (``BatchInfo`` as dicts).
        results: Produce response partitions (``PartitionResult`` as dicts).
        in_flight: Produce requests forwarded on this connection and not yet answered, after this event.
        txn: an EndTxn or AddPartitionsToTxn request (``TxnRequestInfo`` as a dict) or response
            (``TxnResponseInfo`` as a dict), or None.
        error_code: the error code of an EndTxn or AddPartitionsToTxn response, or None.
    """

    t_ms: float
    wall_ms: int
    broker: int
    conn: int
    kind: str
    api: str = ""
    api_version: int = -1
    correlation_id: int = -1
    client_id: str | None = None
    action: str = "forwarded"
    rule: str | None = None
    acks: int | None = None
    timeout_ms: int | None = None
    batches: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    in_flight: int = 0
    txn: dict | None = None
    error_code: int | None = None

    @property
    def records(self) -> int:
        """Records in the request's batches (0 when not a Produce request)."""
        return sum(b["record_count"] for b in self.batches)

    def to_json(self) -> dict:
        return asdict(self)


#: Counter names of ``FaultProxy.stats`` (per broker and api), in display order.
COUNTERS: tuple[str, ...] = (
    "requests", "forwarded", "dropped_requests", "delayed_requests", "responses", "dropped_responses",
    "delayed_responses", "cuts", "records_sent", "lost_ack_records", "max_in_flight", "held_requests",
)


@dataclass
class _Pending:
    header: RequestHeader
    produce: ProduceRequestInfo | None
    rule: Rule | None
    t_ms: float


@dataclass
class HeldRequest:
    """A request a ``hold_request`` rule keeps from the broker, and what became of it.

    Attributes:
        number: 1, 2, ... in the order the proxy held them.
        broker: broker id the request was sent to.
        conn: the client connection it came on (``ProxyEvent.conn``).
        api, api_version, correlation_id, client_id: from its request header.
        txn: the decoded EndTxn or AddPartitionsToTxn body (``TxnRequestInfo``), or None.
        held_ms: when the proxy took it (``FaultProxy.now_ms`` clock).
        client_closed_ms: when the client's connection closed (the client gave up on the
            request: librdkafka and the Java client close a connection whose request timed
            out), or None while it is open.
        released_ms: when the proxy wrote it to the broker, or None while it is held.
        answer: the broker's decoded answer (``TxnResponseInfo``), None before the release or
            for an api this module does not decode.
        answer_error_code: the answer's error code (None: no answer decoded).
        rule: the rule's name.
    """

    number: int
    broker: int
    conn: int
    api: str
    api_version: int
    correlation_id: int
    client_id: str | None
    txn: TxnRequestInfo | None
    held_ms: float
    rule: str
    payload: bytes = field(repr=False, default=b"")
    client_closed_ms: float | None = None
    released_ms: float | None = None
    answer: TxnResponseInfo | None = None
    answer_error_code: int | None = None

    @property
    def released(self) -> bool:
        return self.released_ms is not None

    def to_json(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "payload"}
        if self.answer is not None:
            d["answer"]["error"] = self.answer.error
        return d


@dataclass(eq=False)
class _Connection:
    number: int
    broker: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    pending: dict[int, _Pending] = field(default_factory=dict)
    closed: bool = False
    #: the client closed its side with requests in flight: their answers are read, not sent
    client_gone: bool = False

    def produce_in_flight(self) -> int:
        return sum(1 for p in self.pending.values() if p.header.api_key == PRODUCE)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for w in (self.client, self.upstream):
                try:
                    w.close()
                except Exception:  # already closed by the peer
                    pass


# ----------------------------------------------------------------------------- the proxy


class FaultProxy:
    """An asyncio TCP proxy from each broker's proxy port to its FAULT listener, with rules.

    It runs its own event loop in a background thread, so notebooks and tests use it as a
    plain object (thread-safe methods) or a context manager. ``stop()`` closes the listening
    sockets and every connection and joins the thread; it is registered with ``atexit`` too,
    so no proxy outlives the Python process that started it.

    Args:
        brokers: broker ids to proxy (default: all of ``config.Topology()``).
        topology: the cluster's shape (default ``config.Topology()``).
        max_events: events kept (oldest dropped first).
        control_socket: path of a Unix socket for ``kafkalab fault`` commands (CLI ``serve``
            only), or None.

    Raises (``start``):
        PortInUse: a proxy port is taken (e.g. by ``kafkalab fault serve`` in a terminal).
    """

    def __init__(self, brokers: Iterable[int] | None = None, topology: config.Topology | None = None,
                 max_events: int = 50_000, control_socket: str | os.PathLike | None = None):
        self.topology = topology or config.Topology()
        ids = list(brokers) if brokers is not None else [b.node_id for b in self.topology.brokers]
        self.nodes = {i: self.topology.node(i) for i in ids}
        self.host = "127.0.0.1"
        self.control_socket = Path(control_socket) if control_socket else None
        self.rules = RuleBook()
        self._lock = threading.Lock()
        self._events: deque[ProxyEvent] = deque(maxlen=max_events)
        self._stats: dict[tuple[int, int], dict[str, int]] = {}
        self._connections_opened: dict[int, int] = {i: 0 for i in ids}
        self._conns: dict[int, _Connection] = {}
        self._numbers = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._t0 = time.monotonic()
        self._held: list[HeldRequest] = []
        self.running = False

    # --- life cycle
    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:9096,...``: the proxy ports of the brokers in scope."""
        return ",".join(f"{self.host}:{n.fault_proxy_port}" for n in self.nodes.values())

    def start(self, timeout_s: float = 10.0) -> "FaultProxy":
        """Bind every proxy port and start serving; returns self.

        Raises:
            PortInUse: a proxy port is taken (the message names the process).
            KafkalabError: the event loop did not start within ``timeout_s``.
        """
        if self.running:
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kafkalab-fault-proxy", daemon=True)
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start_servers(), self._loop)
        try:
            fut.result(timeout=timeout_s)
        except BaseException:
            self._stop_loop()
            raise
        self._t0 = time.monotonic()
        self.running = True
        atexit.register(self.stop)
        return self

    async def _start_servers(self) -> None:
        for broker, node in self.nodes.items():
            try:
                server = await asyncio.start_server(
                    lambda r, w, b=broker: self._serve_client(b, r, w), self.host, node.fault_proxy_port,
                    reuse_address=True)
            except OSError as e:
                for s in self._servers:
                    s.close()
                if e.errno == errno.EADDRINUSE:
                    from .cluster import port_owner

                    raise PortInUse(
                        f"fault proxy port {node.fault_proxy_port} (broker {broker}) is taken by "
                        f"{port_owner(node.fault_proxy_port)}. Another fault proxy runs: stop it "
                        "(Ctrl-C in the terminal of `kafkalab fault serve`, or stop() the notebook's proxy)."
                    ) from None
                raise
            self._servers.append(server)
        if self.control_socket is not None:
            self.control_socket.parent.mkdir(parents=True, exist_ok=True)
            if self.control_socket.exists():
                self.control_socket.unlink()  # stale: the ports were free, so no proxy owns it
            self._servers.append(await asyncio.start_unix_server(self._serve_control, str(self.control_socket)))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close the proxy ports and every proxied connection; join the thread. Idempotent."""
        if not self.running:
            return
        self.running = False
        atexit.unregister(self.stop)
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=timeout_s)
        finally:
            self._stop_loop()
            if self.control_socket is not None and self.control_socket.exists():
                self.control_socket.unlink()

    async def _shutdown(self) -> None:
        for s in self._servers:
            s.close()
        for conn in list(self._conns.values()):
            conn.close()
        # closed sockets end every pump; give the handlers a moment to return on their own
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=2)
            for t in still:
                t.cancel()
            await asyncio.gather(*still, return_exceptions=True)
        self._servers.clear()

    def _stop_loop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._loop.close()
            self._loop = None
            self._thread = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- rules
    def add_rule(self, rule: Rule) -> Rule:
        """Add ``rule`` after the existing ones; returns it (its ``seen``/``applied`` count live)."""
        with self._lock:
            return self.rules.add(rule)

    def remove_rule(self, rule: Rule) -> None:
        """Remove ``rule`` if it is there (its counts stay readable on the object)."""
        with self._lock:
            if rule in self.rules.rules:
                self.rules.rules.remove(rule)

    def now_ms(self) -> float:
        """Milliseconds since the proxy started: the clock of ``ProxyEvent.t_ms``."""
        return self._now()

    def clear_rules(self) -> None:
        """Remove every rule: from now on everything is forwarded."""
        with self._lock:
            self.rules.clear()

    def drop_acks(self, count: int, every: int = 2, brokers: Iterable[int] | None = None,
                  client_id: str | None = None, skip: int = 0) -> Rule:
        """Lose the responses of ``count`` Produce requests: the 1st, then one in ``every``
        (default 2: a lost ack, then its retry gets through). See ``Rule``."""
        return self.add_rule(Rule("drop_response", "Produce", tuple(brokers) if brokers is not None else None,
                                  client_id, skip=skip, every=every, times=count))

    def blackhole(self, brokers: Iterable[int], api: str | int = "Produce") -> Rule:
        """Swallow every ``api`` request to ``brokers`` (no forward, no answer) until rules are cleared."""
        return self.add_rule(Rule("drop_request", api, tuple(brokers)))

    # --- held requests (hold_request)
    def held(self) -> list[HeldRequest]:
        """Every request a ``hold_request`` rule took, oldest first (held and released)."""
        with self._lock:
            return list(self._held)

    def release_held(self, requests: Iterable[HeldRequest] | None = None, timeout_s: float = 30.0) -> list[HeldRequest]:
        """Write the held requests (default: every one not yet released) to their broker, late,
        and wait for the broker's answers.

        Each goes on a new connection from the proxy to the broker's FAULT listener: by the
        time the harness releases it, the client has usually closed the connection it came on
        (that is the point: the client gave up on it and moved on). The broker handles a
        request the same on any connection; the transaction coordinator keys its state by
        transactional id, producer id and epoch, not by connection. The answer goes to no
        client; it is decoded (EndTxn, AddPartitionsToTxn) and recorded: on the
        ``HeldRequest`` (``answer``, ``answer_error_code``) and as two events (``request`` and
        ``response``, action ``"released"``).

        Args:
            requests: the held requests to release (from ``held()``), or None for all unreleased.
            timeout_s: seconds to wait for each answer.

        Returns:
            The released ``HeldRequest``s.

        Raises:
            KafkalabError: the broker did not answer within ``timeout_s``, or closed the connection.
        """
        with self._lock:
            todo = [h for h in (list(requests) if requests is not None else self._held) if not h.released]
        fut = asyncio.run_coroutine_threadsafe(self._release(todo, timeout_s), self._loop)
        return fut.result(timeout=timeout_s * max(len(todo), 1) + 10)

    def wait_for_held(self, count: int = 1, timeout_s: float = 60.0, client_closed: bool = False) -> list[HeldRequest]:
        """Wait until ``count`` requests are held (and, with ``client_closed``, until the client
        closed the connection each came on: it gave up on them); returns ``held()``.

        Raises:
            WaitTimeout: naming what was awaited.
        """
        def ok() -> bool:
            hs = [h for h in self.held() if not h.released]
            return len(hs) >= count and (not client_closed or all(h.client_closed_ms is not None for h in hs[:count]))

        what = f"{count} held request(s)" + (" whose client closed the connection" if client_closed else "")
        wait_until(ok, timeout_s=timeout_s, what=what, interval_s=0.02,
                   on_timeout=lambda: f"held: {[h.to_json() for h in self.held()]}")
        return self.held()

    async def _release(self, todo: list[HeldRequest], timeout_s: float) -> list[HeldRequest]:
        for h in todo:
            node = self.nodes[h.broker]
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, node.ports["FAULT"]),
                                                    timeout=timeout_s)
            try:
                h.released_ms = self._now()
                self._record(ProxyEvent(h.released_ms, _wall_ms(), h.broker, h.conn, "request", h.api, h.api_version,
                                        h.correlation_id, h.client_id, action="released", rule=h.rule,
                                        txn=asdict(h.txn) if h.txn else None))
                writer.write(encode_frame(h.payload))
                await writer.drain()
                frames = FrameReader()
                answer: bytes | None = None
                while answer is None:
                    data = await asyncio.wait_for(reader.read(65536), timeout=timeout_s)
                    if not data:
                        raise KafkalabError(f"broker {h.broker} closed the connection instead of answering the "
                                            f"released {h.api} v{h.api_version}")
                    got = frames.feed(data)
                    answer = got[0] if got else None
            except asyncio.TimeoutError:
                raise KafkalabError(f"broker {h.broker} did not answer the released {h.api} within {timeout_s} s") from None
            finally:
                writer.close()
            key = api_key_of(h.api)
            info = _parse_txn_answer(answer, key, h.api_version)
            h.answer = info
            h.answer_error_code = info.error_code if info else None
            self._bump(h.broker, key, "responses")
            self._record(ProxyEvent(self._now(), _wall_ms(), h.broker, h.conn, "response", h.api, h.api_version,
                                    h.correlation_id, h.client_id, action="released", rule=h.rule,
                                    txn=asdict(info) if info else None, error_code=h.answer_error_code))
        return todo

    # --- what happened
    def events(self, api: str | int | None = None, kind: str | None = None, client_id: str | None = None,
               broker: int | None = None) -> list[ProxyEvent]:
        """Events so far (oldest first), filtered by api, kind, client id and broker."""
        key = api_key_of(api) if api is not None else None
        with self._lock:
            evs = list(self._events)
        return [e for e in evs
                if (key is None or e.api == api_name(key)) and (kind is None or e.kind == kind)
                and (client_id is None or e.client_id == client_id) and (broker is None or e.broker == broker)]

    def stats(self, api: str | int | None = "Produce", broker: int | None = None) -> dict[str, int]:
        """Counters summed over brokers (or of ``broker``) for ``api`` (None: every api).

        ``requests``: requests read; ``forwarded``: passed to the broker; ``dropped_requests``;
        ``delayed_requests``; ``responses``: responses read from the broker;
        ``dropped_responses``; ``delayed_responses``; ``cuts``: connections closed by a rule;
        ``records_sent``: records in forwarded Produce requests;
        ``lost_ack_records``: records the broker appended (error NONE) whose response the
        proxy dropped or cut; ``max_in_flight``: most Produce requests awaiting a response on
        one connection at once (a maximum, not a sum); ``connections``: accepted.
        """
        key = api_key_of(api) if api is not None else None
        out = {c: 0 for c in COUNTERS}
        with self._lock:
            for (b, k), counts in self._stats.items():
                if (broker is None or b == broker) and (key is None or k == key or k == -1):
                    for c, v in counts.items():
                        out[c] = max(out[c], v) if c == "max_in_flight" else out[c] + v
            out["connections"] = sum(v for b, v in self._connections_opened.items() if broker is None or b == broker)
        return out

    def stats_table(self) -> list[dict]:
        """One row per (broker, api) seen: ``broker``, ``api`` and the ``COUNTERS`` (for pandas)."""
        with self._lock:
            rows = [{"broker": b, "api": api_name(k) if k >= 0 else "(connection)", **{c: counts.get(c, 0) for c in COUNTERS}}
                    for (b, k), counts in sorted(self._stats.items())]
        return rows

    def reset(self) -> None:
        """Forget events and counters (rules keep their own counts)."""
        with self._lock:
            self._events.clear()
            self._stats.clear()
            self._held.clear()
            self._connections_opened = {i: 0 for i in self.nodes}

    def wait_for(self, condition: Callable[["FaultProxy"], Any], timeout_s: float, what: str) -> Any:
        """``wait_until(lambda: condition(self), ...)``: e.g. until a dropped response was seen.

        Raises:
            WaitTimeout: naming ``what`` and the Produce counters.
        """
        return wait_until(lambda: condition(self), timeout_s=timeout_s, what=what, interval_s=0.02,
                          on_timeout=lambda: f"proxy Produce counters: {self.stats()}")

    # --- internals (event loop thread)
    def _now(self) -> float:
        return round((time.monotonic() - self._t0) * 1000, 3)

    def _record(self, event: ProxyEvent) -> None:
        with self._lock:
            self._events.append(event)

    def _note(self, event: ProxyEvent, api_key: int, action: str, counter: str) -> None:
        """``event`` recorded with what the proxy did (``action``), and ``counter`` counted."""
        event.action = action
        self._record(event)
        self._bump(event.broker, api_key, counter)

    def _bump(self, broker: int, api_key: int, name: str, n: int = 1) -> None:
        with self._lock:
            counts = self._stats.setdefault((broker, api_key), {c: 0 for c in COUNTERS})
            counts[name] += n

    async def _serve_client(self, broker: int, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        number = next(self._numbers)
        node = self.nodes[broker]
        try:
            ureader, uwriter = await asyncio.wait_for(
                asyncio.open_connection(self.host, node.ports["FAULT"]), timeout=10)
        except (OSError, asyncio.TimeoutError):
            # the broker is down: the client sees the connection close, as it would without the proxy
            self._record(ProxyEvent(self._now(), _wall_ms(), broker, number, "close", action="refused"))
            cwriter.close()
            return
        conn = _Connection(number, broker, cwriter, uwriter)
        self._conns[number] = conn
        with self._lock:
            self._connections_opened[broker] = self._connections_opened.get(broker, 0) + 1
        self._record(ProxyEvent(self._now(), _wall_ms(), broker, number, "connect", action="opened"))
        tasks = [asyncio.create_task(self._pump_requests(conn, creader)),
                 asyncio.create_task(self._pump_responses(conn, ureader))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[0].done():
                self._client_left(number)
            if tasks[0].done() and not tasks[1].done() and conn.pending and not conn.closed:
                # The client left with requests in flight (e.g. librdkafka gave up on one after
                # socket.timeout.ms): the broker still handles them. Their answers are read, for
                # the counters (a dropped answer the broker sent late is still a lost ack), not sent.
                conn.client_gone = True
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while conn.pending and not tasks[1].done() and time.monotonic() < deadline:
                    await asyncio.wait([tasks[1]], timeout=0.05)
        except asyncio.CancelledError:
            pass  # proxy shutdown; asyncio's stream callback must not see a cancelled handler
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            conn.close()
            self._conns.pop(number, None)
            self._client_left(number)
            self._record(ProxyEvent(self._now(), _wall_ms(), broker, number, "close", action="closed"))

    def _client_left(self, number: int) -> None:
        """The client of connection ``number`` is gone: its held requests record when."""
        now = self._now()
        with self._lock:
            for h in self._held:
                if h.conn == number and h.client_closed_ms is None:
                    h.client_closed_ms = now

    async def _pump_requests(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        async for payload in _frames(reader):
            header, produce, txn = _parse_request(payload)
            if header is None:  # not even a header: pass it on untouched
                conn.upstream.write(encode_frame(payload))
                await conn.upstream.drain()
                continue
            expects_response = not (produce is not None and produce.acks == 0)
            with self._lock:
                rule = self.rules.decide(header.api_key, conn.broker, header.client_id, expects_response)
            action = rule.action if rule else "forward"
            self._bump(conn.broker, header.api_key, "requests")
            event = ProxyEvent(self._now(), _wall_ms(), conn.broker, conn.number, "request", header.api,
                               header.api_version, header.correlation_id, header.client_id,
                               rule=rule.name if rule else None,
                               acks=produce.acks if produce else None,
                               timeout_ms=produce.timeout_ms if produce else None,
                               batches=[asdict(b) for b in produce.batches] if produce else [],
                               txn=asdict(txn) if txn else None)
            if action == "hold_request":
                self._note(event, header.api_key, "held", "held_requests")
                with self._lock:
                    self._held.append(HeldRequest(len(self._held) + 1, conn.broker, conn.number, header.api,
                                                  header.api_version, header.correlation_id, header.client_id,
                                                  txn, event.t_ms, rule.name, payload))
                continue
            if action == "cut":
                self._note(event, header.api_key, "cut", "cuts")
                conn.close()
                return
            if action == "drop_request":
                event.in_flight = conn.produce_in_flight()
                self._note(event, header.api_key, "dropped", "dropped_requests")
                continue
            if action == "delay_request":
                event.action = "delayed"
                self._bump(conn.broker, header.api_key, "delayed_requests")
                await asyncio.sleep(rule.delay_ms / 1000)
            if expects_response:
                conn.pending[header.correlation_id] = _Pending(
                    header, produce, rule if action in RESPONSE_ACTIONS else None, self._now())
            event.in_flight = conn.produce_in_flight()
            self._record(event)
            self._bump(conn.broker, header.api_key, "forwarded")
            if produce is not None:
                self._bump(conn.broker, header.api_key, "records_sent", produce.record_count)
                with self._lock:  # reset() may have emptied the table since the bump
                    counts = self._stats.setdefault((conn.broker, header.api_key), {c: 0 for c in COUNTERS})
                    counts["max_in_flight"] = max(counts["max_in_flight"], event.in_flight)
            conn.upstream.write(encode_frame(payload))
            await conn.upstream.drain()

    async def _pump_responses(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        async for payload in _frames(reader):
            try:
                corr = response_correlation_id(payload)
            except ProtocolError:
                corr = None
            pending = conn.pending.pop(corr, None)
            if pending is None:  # unreadable, or not a request we saw (cannot happen with Kafka): pass it on
                if not conn.client_gone:
                    conn.client.write(encode_frame(payload))
                    await conn.client.drain()
                continue
            h = pending.header
            results: list[PartitionResult] = []
            if h.api_key == PRODUCE:
                try:
                    results = parse_produce_response(payload, h.api_version)
                except ProtocolError:
                    results = []
            txn_answer = _parse_txn_answer(payload, h.api_key, h.api_version)
            rule = pending.rule
            action = rule.action if rule else "forward"
            self._bump(conn.broker, h.api_key, "responses")
            event = ProxyEvent(self._now(), _wall_ms(), conn.broker, conn.number, "response", h.api,
                               h.api_version, corr, h.client_id, rule=rule.name if rule else None,
                               results=[asdict(r) | {"error": r.error} for r in results],
                               in_flight=conn.produce_in_flight(),
                               txn=asdict(txn_answer) if txn_answer else None,
                               error_code=txn_answer.error_code if txn_answer else None)
            if action in ("drop_response", "cut_at_response"):
                self._note(event, h.api_key, "dropped" if action == "drop_response" else "cut", "dropped_responses")
                if pending.produce is not None:
                    self._bump(conn.broker, h.api_key, "lost_ack_records", _appended_records(pending.produce, results))
                if action == "cut_at_response":
                    self._bump(conn.broker, h.api_key, "cuts")
                    conn.close()
                    return
                continue
            if action == "delay_response":
                event.action = "delayed"
                self._bump(conn.broker, h.api_key, "delayed_responses")
                await asyncio.sleep(rule.delay_ms / 1000)
            self._record(event)
            if conn.client_gone:
                continue
            conn.client.write(encode_frame(payload))
            await conn.client.drain()

    # --- control socket (kafkalab fault serve)
    async def _serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                cmd = json.loads(line)
                if cmd.get("op") == "release":  # awaits the broker, on this loop: not through _control
                    with self._lock:
                        todo = [h for h in self._held if not h.released]
                    done = await self._release(todo, float(cmd.get("timeout_s", 30)))
                    reply = {"ok": True, "released": [h.to_json() for h in done]}
                else:
                    reply = self._control(cmd)
            except (KafkalabError, ValueError, TypeError, KeyError) as e:
                reply = {"ok": False, "error": str(e)}
            writer.write((json.dumps(reply) + "\n").encode())
            await writer.drain()
        finally:
            writer.close()

    def _control(self, cmd: dict) -> dict:
        op = cmd.get("op")
        if op == "status":
            with self._lock:
                rules = [r.to_json() for r in self.rules.rules]
            return {"ok": True, "bootstrap_servers": self.bootstrap_servers, "rules": rules,
                    "stats": self.stats_table(), "produce": self.stats()}
        if op == "add":
            return {"ok": True, "rule": self.add_rule(Rule.from_json(cmd["rule"])).to_json()}
        if op == "clear":
            self.clear_rules()
            return {"ok": True}
        if op == "events":
            evs = self.events(api=cmd.get("api"))[-int(cmd.get("last", 20)):]
            return {"ok": True, "events": [e.to_json() for e in evs]}
        if op == "cut":
            # runs on the loop thread: close directly
            victims = [c for c in self._conns.values() if cmd.get("broker") is None or c.broker == cmd["broker"]]
            for c in victims:
                self._bump(c.broker, -1, "cuts")
                c.close()
            return {"ok": True, "cut": len(victims)}
        if op == "reset":
            self.reset()
            return {"ok": True}
        if op == "held":
            return {"ok": True, "held": [h.to_json() for h in self.held()]}
        raise KafkalabError(f"unknown control op {op!r}")


async def _frames(reader: asyncio.StreamReader):
    """The Kafka frames (payloads) read from ``reader``, until the peer closes."""
    frames = FrameReader()
    while data := await reader.read(65536):
        for payload in frames.feed(data):
            yield payload


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _parse_request(payload: bytes) -> tuple[RequestHeader | None, ProduceRequestInfo | None, TxnRequestInfo | None]:
    """A request's header (None if unreadable), and the body of a Produce request, or of an
    EndTxn or AddPartitionsToTxn request (None for other apis or if unreadable)."""
    try:
        header, _ = parse_request_header(payload)
    except ProtocolError:
        return None, None, None
    parse = {PRODUCE: parse_produce_request, END_TXN: parse_txn_request, ADD_PARTITIONS_TO_TXN: parse_txn_request}
    try:
        body = parse[header.api_key](payload)[1] if header.api_key in parse else None
    except ProtocolError:
        body = None
    return (header, body, None) if header.api_key == PRODUCE else (header, None, body)


def _parse_txn_answer(payload: bytes, api_key: int, api_version: int) -> TxnResponseInfo | None:
    """The answer to an EndTxn or AddPartitionsToTxn request (None for other apis or if unreadable)."""
    if api_key not in (END_TXN, ADD_PARTITIONS_TO_TXN):
        return None
    try:
        return parse_txn_response(payload, api_key, api_version)
    except ProtocolError:
        return None


def _appended_records(request: ProduceRequestInfo, results: list[PartitionResult]) -> int:
    """Records of ``request`` in partitions the broker answered with error NONE (appended, or
    recognised as a duplicate of what it had appended before)."""
    ok = {(r.topic, r.partition) for r in results if r.error_code == 0}
    return sum(b.record_count for b in request.batches if (b.topic, b.partition) in ok)
