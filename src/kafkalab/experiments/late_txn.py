"""The late transaction request (notebook 11, issue 26; KAFKA-17754, Jepsen's Bufstream 0.1.0
analysis, 2024): a transaction-control request that the network delays until the producer has
given up on it and moved on, delivered late, into the producer's next transaction.

The schedule, the same for each client, made by the fault proxy (never by timing luck):

1. the program's transaction N writes records and commits; the proxy *holds* N's EndTxn
   (``hold_request``, ``kafkalab.faults``);
2. the client's request times out: it closes the connection and sends EndTxn again on a new
   one (librdkafka: ``rd_kafka_broker_timeout_scan`` in ``src/rdkafka_broker.c`` times out the
   in-flight request after ``socket.timeout.ms`` and, with ``socket.max.fails=1``, the default,
   tears the connection down; ``rd_kafka_txn_handle_EndTxn`` in ``src/rdkafka_txnmgr.c`` retries
   an EndTxn that timed out (``RD_KAFKA_ERR_ACTION_RETRY``); read in librdkafka's v2.15.0
   source, the pinned confluent-kafka bundles 2.16.0, and seen live: the client closes the
   connection. The Java client: ``NetworkClient.handleTimedOutRequests`` disconnects a
   connection whose request exceeded ``request.timeout.ms``, and the ``TransactionManager``'s
   request handler re-enqueues a request whose connection was lost (``wasDisconnected``);
   apache/kafka ``clients``);
3. the retry gets through: N is committed; the program begins N+1 and writes records, then
   says so (a marker file) and waits;
4. the harness, once the client's connection of the held request is closed and the program
   has written N+1's first records, releases the held EndTxn to the coordinator and records
   its answer; if the coordinator took it (error NONE), the harness waits until the
   partition has no open transaction (its markers are written: LSO = log end offset) before
   it lets the program go on, so that N+1's later records never race the markers;
5. the program writes more records and aborts N+1;
6. a ``read_committed`` reader reads the topic.

Anomalies, in Jepsen's words (``jepsen/src/jepsen/tests/kafka.clj``): an *aborted read* (a
record of the aborted N+1 that the reader sees), a *lost write* (a record of the committed N
the reader does not see), a *torn transaction* (N+1 partly visible).

``run_librdkafka`` runs notebook 11's ``%%program late_txn_producer`` (confluent-kafka) under
the schedule, ``run_java`` the Java producer
(``kafka/src/main/java/kafkalab/clients/LateTxnProducer.java``, kafka-clients 4.4.0);
``kafkalab run late-txn`` is the terminal twin; ``late_txn_analysis`` counts the anomalies in
Spark, ``late_txn_plots`` draws the schedule.

What the 4.3.1 cluster did (spike of issue 26, five consecutive runs each, the same every run; the
4.4.0 cluster does the same: notebook 11 asserts it on every run):

- confluent-kafka 2.16.1 (librdkafka 2.16.0) sends ApiVersions v3 and EndTxn **v1**
  (``rd_kafka_EndTxnRequest`` asks for versions 0-1 only): transactions v1, no epoch bump. The
  late EndTxn(commit) of N, epoch 0, lands while N+1 (same producer id, same epoch) is ongoing:
  the coordinator answers **NONE** and commits N+1's first three records. The program's abort of
  N+1 then fails (INVALID_TXN_STATE, fatal), its later records are refused (INVALID_TXN_STATE),
  and the read_committed reader sees N+1's first three records: 3 aborted reads, 1 torn
  transaction, 0 lost writes, in 5 of 5 runs. For a v1 client the coordinator accepts an EndTxn
  whose epoch equals the current one (``TransactionCoordinator.handleEndTransaction``,
  apache/kafka), and a late request of the same epoch passes that check.
- kafka-clients 4.3.1 sends ApiVersions v4 and EndTxn **v5** (transactions v2, KIP-890 part 2):
  the commit of N returns the bumped epoch 1, N+1 runs at epoch 1, and the late EndTxn of epoch 0
  is answered **PRODUCER_FENCED**: 0 anomalies in 5 of 5 runs.
- Holding N's AddPartitionsToTxn (v0) instead: delivered late into N+1, which already holds
  the partition, it is answered NONE and changes nothing (0 anomalies, 2 runs).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click
from confluent_kafka import Consumer, TopicPartition

from .. import admin, config, java_api, workloads
from ..errors import KafkalabError
from ..faults import FaultProxy, Rule
from ..instruments import fault_gate
from ..ledger import read_events
from ..programs import Program, from_notebook
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ExecSpec, ProgramSpec, lab_conf

#: The notebook whose ``%%program`` cells are the Python programs of this experiment.
NOTEBOOK = "11_late_transaction"


def notebook_program(name: str = "late_txn_producer") -> Program:
    """The transactional producer of notebook 11 (``%%program late_txn_producer``), as saved:
    confluent-kafka code of role ``gated`` (``kafkalab.instruments.fault_gate``): ``lab.conf``
    is ``bootstrap.servers`` (the fault proxy) and ``client.id``; ``lab.delivered`` writes each
    delivery report to the ledger; ``lab.wait_for_fault()`` marks the program ready (N+1's
    first records written) and waits until the harness has delivered the held request.

    Raises:
        ProgramError: the notebook or the program is missing.
    """
    return from_notebook(NOTEBOOK, name)


#: The longest any step of the schedule may take, seconds (a wait's bound, never a claim).
STEP_TIMEOUT_S = 120.0


@dataclass
class LateTxnRun:
    """One run of the schedule.

    Attributes:
        client: ``"librdkafka"`` or ``"java"``.
        topic: the run's topic (1 partition, replication factor 3).
        held: the held request (``HeldRequest.to_json()``): its api, version, producer id and
            epoch, and the broker's answer when it was released late.
        late_answer: the error name the coordinator answered the late request (``"NONE"``: it
            applied it).
        versions: request api -> sorted versions the client sent (as the proxy decoded them).
        txn_answers: every EndTxn/AddPartitionsToTxn response of the run, in order: ``api``,
            ``version``, ``error``, ``producer_epoch`` (EndTxn v5+), ``action`` (``forwarded``
            to the client, or ``released``: the answer to the late request, which no client
            gets) and ``t_ms`` (the proxy's clock, as ``held``'s times).
        program: the program's steps, one dict each: ``delivery`` (value, offset, error),
            ``committed`` (N), ``aborted`` or ``error`` (how N+1 ended), then ``output`` (the
            end of its log).
        seen: values the read_committed reader read, in offset order.
        committed_n: N's values the program saw committed; ``aborted_n1``: N+1's values.
        lost_writes: values of a committed N the reader does not see.
        aborted_reads: values of N+1 (aborted, or never committed) the reader sees.
        torn: N+1 is partly visible (some of its values seen, others not).
        log_end_offset, last_stable_offset: of the partition after the run (an open
            transaction holds the LSO back).
    """

    client: str
    topic: str
    held: dict
    late_answer: str
    versions: dict[str, list[int]]
    txn_answers: list[dict]
    program: list[dict]
    seen: list[str]
    committed_n: list[str]
    aborted_n1: list[str]
    lost_writes: list[str] = field(default_factory=list)
    aborted_reads: list[str] = field(default_factory=list)
    torn: bool = False
    log_end_offset: int = -1
    last_stable_offset: int = -1

    def to_json(self) -> dict:
        return asdict(self)

    def counts(self) -> dict:
        """One line of the closing table: the late request, the coordinator's answer, the
        anomaly counts (records), and the EndTxn versions on the wire."""
        txn = self.held.get("txn") or {}
        return {"client": self.client, "late_request": f"{self.held['api']} v{self.held['api_version']}",
                "late_epoch": txn.get("producer_epoch"), "late_answer": self.late_answer,
                "aborted_reads": len(self.aborted_reads), "lost_writes": len(self.lost_writes),
                "torn_transactions": int(self.torn), "end_txn_versions": self.versions.get("EndTxn", []),
                "api_versions_versions": self.versions.get("ApiVersions", [])}


def _offsets(topic: str, timeout_s: float) -> tuple[int, int]:
    """(log end offset, last stable offset) of partition 0: an open transaction holds the LSO back."""
    return tuple(admin.list_offsets([(topic, 0)], isolation_level=level, timeout_s=timeout_s)[(topic, 0)]
                 for level in ("read_uncommitted", "read_committed"))


def _wait_no_open_transaction(topic: str, timeout_s: float) -> None:
    """Wait until partition 0's last stable offset equals its log end offset (every marker of
    the transaction written: KIP-98, the LSO).

    Raises:
        WaitTimeout: a transaction stays open longer than ``timeout_s``.
    """
    def closed() -> bool:
        leo, lso = _offsets(topic, timeout_s)
        return leo == lso

    wait_until(closed, timeout_s=timeout_s, what=f"no open transaction on {topic}-0 (LSO = log end offset)",
               interval_s=0.05)


def _read_committed(topic: str, timeout_s: float) -> tuple[list[str], int, int]:
    """Values a read_committed reader reads from partition 0 up to the last stable offset, and
    the (log end offset, last stable offset)."""
    leo, lso = _offsets(topic, timeout_s)
    values: list[str] = []
    c = Consumer({"bootstrap.servers": config.Topology().bootstrap_servers, "group.id": f"{topic}-reader",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])

        def caught_up() -> bool:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                values.append(m.value().decode())
            return c.position([TopicPartition(topic, 0)])[0].offset >= lso

        wait_until(caught_up, timeout_s=timeout_s, what=f"the read_committed reader reaching the LSO {lso} of {topic}",
                   interval_s=0)
    finally:
        c.close()
    return values, leo, lso


def _analyse(client: str, topic: str, held: dict, answers: list[dict], versions: dict[str, list[int]],
             program: list[dict], seen: list[str], leo: int, lso: int) -> LateTxnRun:
    committed = any(p.get("step") == "committed" and p.get("txn") == "N" for p in program)
    written = [p["value"] for p in program if p.get("step") == "delivery" and not p.get("error")]
    n_values = [v for v in written if v.startswith("N-")] if committed else []
    n1_values = [v for v in written if v.startswith("N+1")]
    seen_set = set(seen)
    lost = [v for v in n_values if v not in seen_set]
    aborted = [v for v in seen if v.startswith("N+1")]
    n1_all = [f"N+1-before-{i}" for i in range(3)] + [f"N+1-after-{i}" for i in range(3)]
    visible = [v for v in n1_all if v in seen_set]
    late = held.get("answer") or {}
    return LateTxnRun(client, topic, held, late.get("error", "none"), versions, answers, program, seen,
                      n_values, n1_values, lost, aborted, 0 < len(visible) < len(n1_all), leo, lso)


def _versions(proxy: FaultProxy, client_id: str) -> dict[str, list[int]]:
    out: dict[str, set[int]] = {}
    for e in proxy.events(kind="request", client_id=client_id):
        out.setdefault(e.api, set()).add(e.api_version)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _txn_answers(proxy: FaultProxy, client_id: str) -> list[dict]:
    return [{"api": e.api, "version": e.api_version, "error": (e.txn or {}).get("error") or _err(e.error_code),
             "producer_epoch": (e.txn or {}).get("producer_epoch"), "action": e.action, "t_ms": e.t_ms}
            for e in proxy.events(kind="response", client_id=client_id) if e.api in ("EndTxn", "AddPartitionsToTxn")]


def _err(code: int | None) -> str:
    from ..protocol import ERROR_NAMES

    return ERROR_NAMES.get(code, str(code)) if code is not None else "?"


def _steps_from_ledger(ledger: Path, returncode: int, log: str) -> list[dict]:
    """A ``gated`` program's run as step lines, in its ledger's order: its delivery reports
    (``lab.delivered``), the transactions it saw committed (``lab.committed("N")``, written once
    ``commit_transaction()`` returned), and how it ended (the last line of its traceback if it
    raised)."""
    steps: list[dict] = []
    for e in read_events(ledger, kinds=("acked", "committed")):
        if e.kind == "acked":
            steps.append({"step": "delivery", "value": e.value, "offset": e.offset, "error": e.error})
        elif e.kind == "committed":
            steps.append({"step": "committed", "txn": e.value})
    if returncode == 0:
        steps.append({"step": "aborted", "txn": "N+1"})
    else:
        last = next((line for line in reversed(log.splitlines()) if "Error" in line or "Exception" in line), "")
        name = last.split("code=", 1)[1].split(",", 1)[0] if "code=" in last else last.strip()
        steps.append({"step": "error", "txn": "N+1", "error": name, "message": last.strip()})
    return steps


def _schedule(client: str, start, hold_api: str = "EndTxn") -> LateTxnRun:
    """Run one client under the schedule. ``start(bootstrap, topic, client_id, run_id, ledger)``
    spawns it (a ``workloads.Worker``) with ``bootstrap`` the fault proxy; the client marks
    ``fault_gate.ready_path(ledger)`` once N+1's first records are written and waits for
    ``fault_gate.go_path(ledger)``."""
    scope = RunScope(f"late-txn-{client}")
    topic = scope.topic("events")
    client_id = scope.name("producer")
    ledger = workloads.run_dir(scope.run_id) / f"{client_id}.jsonl"
    ready, go = fault_gate.ready_path(ledger), fault_gate.go_path(ledger)
    admin.create_topics({topic: 1})
    child = None
    try:
        with FaultProxy() as proxy:
            rule = proxy.add_rule(Rule("hold_request", api=hold_api, client_id=client_id, times=1))
            child = start(proxy.bootstrap_servers, topic, client_id, scope.run_id, ledger)

            def ended_early() -> None:
                if not child.alive and not ready.exists():
                    raise KafkalabError(f"the {client} program exited {child.returncode} before N+1:\n{child.log_tail()}")

            def held_and_given_up() -> bool:
                ended_early()
                hs = proxy.held()
                return bool(hs) and hs[0].client_closed_ms is not None

            wait_until(held_and_given_up, timeout_s=STEP_TIMEOUT_S, interval_s=0.02,
                       what=f"{client_id}: N's {hold_api} held and the client's connection closed (it gave up)")

            def n1_written() -> bool:
                ended_early()
                return ready.exists()

            wait_until(n1_written, timeout_s=STEP_TIMEOUT_S, interval_s=0.01,
                       what=f"{client_id}: N committed by the retry and N+1's first records written")
            released = proxy.release_held(timeout_s=30)
            if released[0].api == "EndTxn" and released[0].answer_error_code == 0:
                # The coordinator took the late request: let its markers land before the
                # program goes on, so that what follows never races them (every run alike).
                _wait_no_open_transaction(topic, STEP_TIMEOUT_S)
            go.touch()
            returncode = child.wait(STEP_TIMEOUT_S)
            held = released[0].to_json()
            versions = _versions(proxy, client_id)
            answers = _txn_answers(proxy, client_id)
        if rule.applied != 1:
            raise KafkalabError(f"the proxy held {rule.applied} {hold_api} requests, not 1")
        log = child.log_tail(200)
        steps = (_steps_from_ledger(ledger, returncode, log) if client == "librdkafka"
                 else [json.loads(line) for line in ledger.read_text().splitlines()])
        seen, leo, lso = _read_committed(topic, STEP_TIMEOUT_S)
        run = _analyse(client, topic, held, answers, versions, steps, seen, leo, lso)
        run.program.append({"step": "output", "text": log[-4000:]})
        return run
    finally:
        if child is not None and child.alive:
            child.kill()
        scope.cleanup()


def run_librdkafka(program: Program | None = None, hold_api: str = "EndTxn") -> LateTxnRun:
    """Run the producer ``program`` (a ``%%program`` cell of notebook 11, role ``gated``;
    default ``notebook_program()``) under the schedule, holding transaction N's ``hold_api`` request.

    Raises:
        WaitTimeout: a step of the schedule did not happen within ``STEP_TIMEOUT_S`` seconds.
        KafkalabError: the program ended before N+1, or the broker did not answer the late request.
    """
    program = program or notebook_program()

    def start(bootstrap: str, topic: str, client_id: str, run_id: str, ledger: Path) -> workloads.Worker:
        conf = lab_conf(client_id, bootstrap_servers=bootstrap)
        return workloads.spawn(ProgramSpec(client_id, run_id, str(ledger), "gated", program.name, program.source,
                                           conf=conf, topics=[topic], options={"records": []}))

    return _schedule("librdkafka", start, hold_api)


#: The Java producer's class, compiled by ``make jars`` from
#: ``kafka/src/main/java/kafkalab/clients/LateTxnProducer.java`` against kafka-clients 4.4.0.
JAVA_CLASS = "kafkalab.clients.LateTxnProducer"


def run_java() -> LateTxnRun:
    """Run the Java producer (``JAVA_CLASS``, kafka-clients 4.4.0) under the schedule.

    Raises:
        JarsMissing: ``make jars`` has not built it.
        WaitTimeout, KafkalabError: as ``run_librdkafka``.
    """
    classpath = java_api.program_classpath(JAVA_CLASS)

    def start(bootstrap: str, topic: str, client_id: str, run_id: str, ledger: Path) -> workloads.Worker:
        argv = java_api.java_command(classpath, JAVA_CLASS, bootstrap, topic, client_id + "-txn", client_id,
                                     str(ledger), str(fault_gate.ready_path(ledger)), str(fault_gate.go_path(ledger)))
        return workloads.spawn(ExecSpec(client_id, run_id, str(ledger), argv))

    return _schedule("java", start)


# ----------------------------------------------------------------------------- CLI


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)
from ..programs import java_source  # noqa: E402

#: The part of the Java producer's source notebook 11 shows (``programs.java_source`` markers).
JAVA_SHOWN = ("kafkalab/clients/LateTxnProducer.java", "Properties props", "log.close()")


@click.command("late-txn")
@click.option("--client", type=click.Choice(["librdkafka", "java"]), default="librdkafka", show_default=True,
              help="The producer under the schedule: confluent-kafka (transactions v1) or kafka-clients 4.4.0 (v2).")
@click.option("--hold", "hold_api", type=click.Choice(["EndTxn", "AddPartitionsToTxn"]), default="EndTxn",
              show_default=True, help="The request of transaction N the proxy holds (librdkafka only for AddPartitionsToTxn).")
@click.option("--runs", type=click.IntRange(1, 20), default=1, show_default=True, help="Consecutive runs.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print every run's result as JSON.")
def cli_command(client: str, hold_api: str, runs: int, as_json: bool) -> None:
    """KAFKA-17754: hold transaction N's request, deliver it late into N+1; count the anomalies.
    Runs notebook 11's late_txn_producer program, or (--client java) LateTxnProducer.java."""
    if client == "java" and hold_api != "EndTxn":
        raise click.UsageError("the Java producer (transactions v2) sends no AddPartitionsToTxn: use --hold EndTxn")
    program = None if client == "java" else notebook_program()
    show_programs(java_source(*JAVA_SHOWN) if program is None else program)
    results = [run_java() if program is None else run_librdkafka(program, hold_api=hold_api) for _ in range(runs)]
    if as_json:
        click.echo(json.dumps([r.to_json() for r in results], indent=2))
        return
    for n, r in enumerate(results, 1):
        c = r.counts()
        click.echo(f"run {n}: late {c['late_request']} epoch {c['late_epoch']} -> {c['late_answer']}; "
                   f"aborted reads {c['aborted_reads']}, lost writes {c['lost_writes']}, "
                   f"torn transactions {c['torn_transactions']}; EndTxn versions {c['end_txn_versions']}")
