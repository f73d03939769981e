"""The partition that stopped (notebook 13, issue 38): a transactional producer dies with its
transaction open, and a ``read_committed`` consumer group stops on one partition. Found as an
operator finds it, from what the dashboards and tools show, then fixed.

The schedule, the same every run (conditions, never timing luck):

1. a topic of 3 partitions, all led by broker 1 (one ``JmxTool`` reads all three gauges);
   ``JmxTool`` starts reading broker 1's ``LastStableOffsetLag`` per partition and
   ``PartitionsWithLateTransactionsCount`` (``kafkalab.metrics.JmxWatch``);
2. two consumer programs run, each in a group of its own: notebook 13's ``orders_consumer``
   (``read_committed``) and the same program edited to ``read_uncommitted``; each writes
   librdkafka's statistics (``lab.statistics``);
3. the other services' records arrive on every partition, in rounds (the harness writes them,
   ``workloads.produce``: the traffic, not the lesson);
4. notebook 13's ``payments_producer`` (role ``gated``) commits two transactions on partition 0,
   begins a third, writes it and waits at ``lab.wait_for_fault()``; there the lab SIGKILLs it:
   the transaction stays open;
5. more rounds of traffic, each one until ``JmxTool`` has sampled after it: the consumers
   keep up on partitions 1 and 2, the ``read_committed`` one stops at partition 0's last stable
   offset;
6. the operator's tools: group lag (``metrics.group_lag``), ``kafka-transactions list``,
   ``describe``, ``describe-producers``, ``find-hanging``;
7. the fix: ``fix="abort"``: ``kafka-transactions abort --start-offset`` (KIP-664) writes the
   abort marker; ``fix="timeout"``: nothing, the coordinator aborts the transaction once
   ``transaction.timeout.ms`` has passed (its check runs every
   ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, KIP-98);
8. a last round: the ``read_committed`` group catches up.

``kafkalab run stalled-partition`` is the terminal twin; ``stalled_partition_analysis`` builds
the tables and ``stalled_partition_plots`` the dashboard.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from .. import admin, metrics, workloads
from ..cluster.common import tool
from ..errors import KafkalabError
from ..instruments import fault_gate
from ..instruments.consumer import statistics_path
from ..ledger import read_events
from ..programs import Program, from_notebook, program_settings
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf

#: The notebook whose ``%%program`` cells are this experiment's programs.
NOTEBOOK = "13_stalled_partition"
#: Partitions of the topic; the producer writes partition ``STUCK``; broker ``LEADER`` leads all.
PARTITIONS = 3
STUCK = 0
LEADER = 1
#: Records per partition in one round of the other services' traffic.
ROUND_RECORDS = 10
#: Rounds written while the partition is stalled.
STALLED_ROUNDS = 5
#: The longest any step of the schedule may take, seconds (a wait's bound, never a claim).
STEP_TIMEOUT_S = 120.0
#: The broker setting that paces the coordinator's check for timed-out transactions (KIP-98;
#: Kafka's default 10000 ms).
CLEANUP_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
READ_COMMITTED = '"isolation.level": "read_committed"'


def notebook_program(name: str) -> Program:
    """A program of notebook 13 as saved (``payments_producer``, ``orders_consumer``).

    Raises:
        ProgramError: the notebook or the program is missing.
    """
    return from_notebook(NOTEBOOK, name)


def uncommitted_twin(consumer: Program) -> Program:
    """``consumer`` with ``isolation.level`` read_uncommitted: the same program, the other
    isolation level (``Program.replace``).

    Raises:
        ProgramError: the program does not say ``"isolation.level": "read_committed"`` once.
    """
    return consumer.replace(READ_COMMITTED, '"isolation.level": "read_uncommitted"', name=f"{consumer.name}_uncommitted")


def parse_tool_table(text: str) -> list[dict[str, str]]:
    """The rows of a ``kafka-transactions`` table (``list``, ``describe``, ``describe-producers``,
    ``find-hanging``): a header line of tab-separated column names, then one tab-separated row
    each (cells padded with spaces). Lines before the header and rows of another width skipped."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if "\t" not in line:
            continue
        cells = [c.strip() for c in line.rstrip("\t").split("\t")]
        if header is None:
            header = cells
        elif len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


@dataclass
class ToolAnswer:
    """One ``kafka-transactions`` call: its arguments, exit code, output and parsed rows."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    rows: list[dict[str, str]] = field(default_factory=list)


def transactions_tool(*args: str) -> ToolAnswer:
    """Run ``kafka-transactions ARGS`` (``cluster.common.tool``), parse its table; a failing call
    is returned, not raised (what a tool refuses is part of the lesson)."""
    cp = tool("kafka-transactions", *args, check=False, timeout_s=STEP_TIMEOUT_S)
    return ToolAnswer(list(args), cp.returncode, cp.stdout, cp.stderr.strip()[-2000:], parse_tool_table(cp.stdout))


@dataclass
class StalledRun:
    """One run of the schedule (module docstring). Times are ms since the epoch.

    Attributes:
        topic: the run's topic (``PARTITIONS`` partitions, all led by broker ``LEADER``).
        fix: ``"abort"`` (``kafka-transactions abort``), ``"timeout"`` (nothing done) or
            ``"restart"`` (the producer started again with its ``transactional.id``).
        transactional_id: the dead producer's ``transactional.id``.
        transaction_timeout_ms: its ``transaction.timeout.ms``, read from the program's text.
        cleanup_interval_ms: the brokers' ``CLEANUP_INTERVAL``.
        killed_ms: when the lab SIGKILLed the producer.
        txn_start_ms: the open transaction's start, as the coordinator reports it
            (``describe``: ``CurrentTransactionStartTimeMs``).
        fix_ms: when the abort was sent or the restarted producer spawned, else when the
            harness began waiting.
        resolved_ms: the first moment the harness saw partition ``STUCK``'s LSO reach its log end.
        delivered: the dead producer's delivery reports (value, partition, offset).
        jmx: ``JmxTool``'s samples: ``t_ms``, ``lso_lag`` (partition -> value) and
            ``late_transactions`` (broker 1's ``PartitionsWithLateTransactionsCount``).
        statistics: the ``read_committed`` consumer's librdkafka statistics, one row per
            report and partition (``metrics.PartitionStats.to_json``); ``statistics_uncommitted``:
            the other one's.
        lag: the group tools' lag (``metrics.group_lag``) at ``stalled`` and ``after`` the fix,
            per group label (``read_committed``, ``read_uncommitted``) and partition.
        tools: each ``kafka-transactions`` call by name (``ToolAnswer`` as JSON).
        rounds_ms: when each round of traffic was written.
    """

    topic: str
    fix: str
    transactional_id: str
    transaction_timeout_ms: int
    cleanup_interval_ms: int
    killed_ms: int
    txn_start_ms: int
    fix_ms: int
    resolved_ms: int
    delivered: list[dict]
    jmx: list[dict]
    statistics: list[dict]
    statistics_uncommitted: list[dict]
    lag: dict[str, dict[str, dict[int, dict[str, int]]]]
    tools: dict[str, dict]
    rounds_ms: list[int]

    def to_json(self) -> dict:
        return json.loads(json.dumps(asdict(self)))

    def tool_rows(self, name: str) -> list[dict[str, str]]:
        """The parsed rows of the ``kafka-transactions`` call ``name``."""
        return self.tools[name]["rows"]

    def summary(self) -> dict:
        """The numbers of the run in one line: the group tools' lag on each partition while
        stalled and after the fix, what ``find-hanging`` found, how long the fix took."""
        rc = self.lag["stalled"]["read_committed"]
        ru = self.lag["stalled"]["read_uncommitted"]
        return {"fix": self.fix, "read_committed lag while stalled": [rc[p]["lag"] for p in sorted(rc)],
                "read_uncommitted lag while stalled": [ru[p]["lag"] for p in sorted(ru)],
                "read_committed lag after": [v["lag"] for _, v in sorted(self.lag["after"]["read_committed"].items())],
                "find-hanging rows": len(self.tool_rows("find-hanging")),
                "transaction state": (self.tool_rows("describe") or [{}])[0].get("TransactionState"),
                "ms from the transaction's start to the LSO moving": self.resolved_ms - self.txn_start_ms,
                "transaction.timeout.ms": self.transaction_timeout_ms}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _round(topic: str, n: int) -> int:
    """One round of the other services' traffic: ``ROUND_RECORDS`` records on each partition
    (plain producer, every delivery awaited). Returns when it was written (ms)."""
    records = [(f"o{n}-{p}-{i}".encode(), f"order-{n}-{p}-{i}".encode(), p, None)
               for p in range(PARTITIONS) for i in range(ROUND_RECORDS)]
    workloads.produce(topic, records)
    return _now_ms()


def _lso_at_end(topic: str) -> bool:
    leo = admin.list_offsets([(topic, STUCK)])[(topic, STUCK)]
    lso = admin.list_offsets([(topic, STUCK)], isolation_level="read_committed")[(topic, STUCK)]
    return leo == lso


def _caught_up(groups: dict[str, str], topic: str, stalled: bool) -> dict | None:
    """The group tools' lag of both groups if each has committed what it can read: the
    ``read_uncommitted`` group up to every log end, the ``read_committed`` one up to the log end
    on the partitions that are not stalled and to the LSO on the stalled one; else None."""
    out = {label: metrics.group_lag(g, topic, PARTITIONS) for label, g in groups.items()}
    for label, parts in out.items():
        for p, v in parts.items():
            target = v["last_stable_offset"] if (label == "read_committed" and stalled and p == STUCK) else v["log_end_offset"]
            if v["committed"] != target:
                return None
    return out


def _spawn_consumer(program: Program, scope: RunScope, topic: str, group: str, client: str):
    ledger = workloads.run_dir(scope.run_id) / f"{client}.jsonl"
    worker = workloads.spawn(ProgramSpec(client, scope.run_id, str(ledger), "consumer", program.name, program.source,
                                         conf=lab_conf(client, group_id=group), topics=[topic], options={}))
    return worker, ledger


def _assigned(ledger: Path) -> set[int]:
    """Partitions a consumer program's ledger shows assigned (none before its ledger exists)."""
    if not ledger.exists():
        return set()
    return {e.partition for e in read_events(ledger, kinds="assigned")}


FIXES = ("abort", "timeout", "restart")


def run(producer: Program | None = None, consumer: Program | None = None, fix: str = "abort",
        restart: Program | None = None) -> StalledRun:
    """Run the schedule (module docstring) with notebook 13's ``payments_producer`` and
    ``orders_consumer`` (or the given programs) and the fix: ``"abort"``, ``"timeout"``, or
    ``"restart"``: the program ``restart`` (role ``producer``) runs under the dead producer's
    name (so its ``lab.name + "-txn"`` is the same ``transactional.id``) until it ends, as a
    service restarting would.

    Raises:
        ValueError: unknown ``fix``, or ``"restart"`` without a ``restart`` program.
        KafkalabError: a program ended early (its log), or the abort failed.
        WaitTimeout: a step did not happen within ``STEP_TIMEOUT_S`` (for ``"timeout"``: the
            transaction's timeout plus twice the cleanup interval plus ``STEP_TIMEOUT_S``).
    """
    if fix not in FIXES:
        raise ValueError(f"fix must be one of {', '.join(FIXES)}, not {fix!r}")
    if (fix == "restart") != (restart is not None):
        raise ValueError("a restart program goes with fix='restart', and only with it")
    producer = producer or notebook_program("payments_producer")
    consumer = consumer or notebook_program("orders_consumer")
    txn_timeout_ms = int(program_settings(producer.source).get("transaction.timeout.ms", 60000))
    cleanup_ms = int(admin.describe_config("broker", LEADER, [CLEANUP_INTERVAL])[CLEANUP_INTERVAL].value)
    scope = RunScope("stalled")
    topic = scope.topic("payments")
    groups = {"read_committed": scope.group("dashboard-rc"), "read_uncommitted": scope.group("dashboard-ru")}
    folder = workloads.run_dir(scope.run_id)
    workers: list = []
    try:
        admin.create_placed_topics({topic: {}}, replicas=[LEADER, 2, 3], partitions=PARTITIONS)
        admin.wait_leaders_serving([(topic, p) for p in range(PARTITIONS)])
        mbeans = [metrics.lso_lag_mbean(topic, p) for p in range(PARTITIONS)] + [metrics.LATE_TRANSACTIONS]
        with metrics.JmxWatch(LEADER, mbeans, folder, scope.run_id) as jmx:
            ledgers = {}
            for label, program in (("read_committed", consumer), ("read_uncommitted", uncommitted_twin(consumer))):
                w, ledgers[label] = _spawn_consumer(program, scope, topic, groups[label], scope.name(f"consumer-{label}"))
                workers.append(w)

            def all_assigned() -> bool:
                for w in workers:
                    if not w.alive:
                        raise KafkalabError(f"a consumer program exited {w.returncode}:\n{w.log_tail()}")
                return all(len(_assigned(ledger)) == PARTITIONS for ledger in ledgers.values())

            wait_until(all_assigned, timeout_s=STEP_TIMEOUT_S, what="both consumer programs assigned every partition")
            rounds = [_round(topic, 0)]
            jmx.wait_samples(after_ms=rounds[-1], timeout_s=STEP_TIMEOUT_S)

            client = scope.name("payments")
            ledger = folder / f"{client}.jsonl"
            child = workloads.spawn(ProgramSpec(client, scope.run_id, str(ledger), "gated", producer.name, producer.source,
                                                conf=lab_conf(client), topics=[topic], options={"records": []}))
            workers.append(child)

            def at_gate() -> bool:
                if not child.alive:
                    raise KafkalabError(f"{producer.name} exited {child.returncode} before its gate:\n{child.log_tail()}")
                return fault_gate.ready_path(ledger).exists()

            wait_until(at_gate, timeout_s=STEP_TIMEOUT_S, interval_s=0.02,
                       what=f"{producer.name}: its last transaction written, at lab.wait_for_fault()")
            child.kill()  # the fault: SIGKILL with the transaction open
            killed_ms = _now_ms()
            delivered = [{"value": e.value, "partition": e.partition, "offset": e.offset, "error": e.error}
                         for e in read_events(ledger, kinds="acked")]
            for n in range(1, STALLED_ROUNDS + 1):
                rounds.append(_round(topic, n))
                jmx.wait_samples(after_ms=rounds[-1], timeout_s=STEP_TIMEOUT_S)
            stalled = wait_until(lambda: _caught_up(groups, topic, stalled=True), timeout_s=STEP_TIMEOUT_S,
                                 interval_s=0.2, what="both groups' commits caught up with what they can read")
            transactional_id = client + "-txn"
            tools = {"list": transactions_tool("list"),
                     "describe": transactions_tool("describe", "--transactional-id", transactional_id),
                     "describe-producers": transactions_tool("describe-producers", "--topic", topic,
                                                             "--partition", str(STUCK)),
                     "find-hanging": transactions_tool("find-hanging", "--broker-id", str(LEADER))}
            describe = tools["describe"].rows
            txn_start_ms = int(describe[0]["CurrentTransactionStartTimeMs"]) if describe else -1
            fix_ms = _now_ms()
            if fix == "abort":
                open_txn = [r for r in tools["describe-producers"].rows if r.get("CurrentTransactionStartOffset", "-1") != "-1"]
                if not open_txn:
                    raise KafkalabError(f"describe-producers shows no open transaction:\n{tools['describe-producers'].stdout}")
                tools["abort"] = transactions_tool("abort", "--topic", topic, "--partition", str(STUCK),
                                                   "--start-offset", open_txn[0]["CurrentTransactionStartOffset"])
                if tools["abort"].returncode != 0:
                    raise KafkalabError(f"kafka-transactions abort failed: {tools['abort'].stderr}")
                bound_s = STEP_TIMEOUT_S
            elif fix == "restart":
                again = workloads.spawn(ProgramSpec(client, scope.run_id, str(folder / f"{client}-restart.jsonl"),
                                                    "producer", restart.name, restart.source, conf=lab_conf(client),
                                                    topics=[topic], options={"records": []}))
                workers.append(again)
                if again.wait(STEP_TIMEOUT_S) != 0:
                    raise KafkalabError(f"{restart.name} exited {again.returncode}:\n{again.log_tail()}")
                bound_s = STEP_TIMEOUT_S
            else:
                bound_s = (txn_timeout_ms + 2 * cleanup_ms) / 1000 + STEP_TIMEOUT_S
            wait_until(lambda: _lso_at_end(topic), timeout_s=bound_s, interval_s=0.1,
                       what=f"{topic}-{STUCK}: the open transaction ended (LSO = log end offset)")
            resolved_ms = _now_ms()
            tools["describe-after"] = transactions_tool("describe", "--transactional-id", transactional_id)
            tools["find-hanging-after"] = transactions_tool("find-hanging", "--broker-id", str(LEADER))
            rounds.append(_round(topic, STALLED_ROUNDS + 1))
            after = wait_until(lambda: _caught_up(groups, topic, stalled=False), timeout_s=STEP_TIMEOUT_S,
                               interval_s=0.2, what="the read_committed group caught up after the fix")
            jmx.wait_samples(after_ms=_now_ms(), timeout_s=STEP_TIMEOUT_S)
        for w in workers:
            if w.alive:
                w.terminate(timeout_s=30)
        samples = [{"t_ms": s.t_ms, "lso_lag": {p: s.value(metrics.lso_lag_mbean(topic, p)) for p in range(PARTITIONS)},
                    "late_transactions": s.value(metrics.LATE_TRANSACTIONS)} for s in jmx.samples()]
        stats = {label: [s.to_json() for s in metrics.read_statistics(statistics_path(path)) if s.topic == topic]
                 for label, path in ledgers.items()}
        return StalledRun(topic, fix, transactional_id, txn_timeout_ms, cleanup_ms, killed_ms, txn_start_ms, fix_ms,
                          resolved_ms, delivered, samples, stats["read_committed"], stats["read_uncommitted"],
                          {"stalled": stalled, "after": after}, {k: asdict(v) for k, v in tools.items()}, rounds)
    finally:
        for w in workers:
            if w.alive:
                w.kill()
        scope.cleanup()


# ----------------------------------------------------------------------------- CLI


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("stalled-partition")
@click.option("--fix", type=click.Choice(["abort", "timeout"]), default="abort", show_default=True,
              help="abort: kafka-transactions abort; timeout: wait for transaction.timeout.ms.")
@click.option("--timeout-ms", type=click.IntRange(1000, 900000), default=None,
              help="Run payments_producer with this transaction.timeout.ms instead of the notebook's.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cli_command(fix: str, timeout_ms: int | None, as_json: bool) -> None:
    """A transactional producer dies with its transaction open: one partition's read_committed lag
    grows; the dashboards (group lag, JMX LastStableOffsetLag, librdkafka statistics), the
    kafka-transactions tool, and the fix. Runs notebook 13's payments_producer and orders_consumer."""
    producer, consumer = notebook_program("payments_producer"), notebook_program("orders_consumer")
    if timeout_ms is not None:
        old = program_settings(producer.source).get("transaction.timeout.ms")
        producer = producer.replace(f'"transaction.timeout.ms": {old},', f'"transaction.timeout.ms": {timeout_ms},')
    show_programs(producer, consumer)
    result = run(producer, consumer, fix=fix)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    for k, v in result.summary().items():
        click.echo(f"{k}: {v}")
