"""``kafkalab``: the command line twin of the notebooks.

    kafkalab up [--controllers 1|3] [--backend local|compose]
    kafkalab status [--json]
    kafkalab kill|stop|start|pause|resume ID
    kafkalab down
    kafkalab tool kafka-topics --list
    kafkalab run assignment --consumers 3 --topic A:2 --topic B:2 --strategy range --json
    kafkalab run eos --messages 600 --show   (every run: --show prints the programs it runs first)
    kafkalab i18n update|build|status|show|fill   (the Korean edition, ``make ko``)

Errors kafkalab raises on purpose are printed as one message (no traceback) with exit code 1.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time

import click

from . import cluster as cluster_mod
from . import runscope
from .clickutil import KafkalabGroup, show_programs, shows_programs


@click.group(cls=KafkalabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafkalab")
def main() -> None:
    """Run, break and inspect the kafkalab Kafka cluster; run the notebooks' experiments."""


@main.command()
def extras() -> None:
    """One line: what is skipped on this machine (no Chromium, CJK font, strace; not Linux) and how
    to install it here; nothing when nothing is missing (kafkalab.optional)."""
    from . import optional

    line = optional.note()
    if line:
        click.echo(line)


@main.command()
@click.option("--controllers", type=click.Choice(["1", "3"]), default=None,
              help="KRaft controllers (default: what the last up used, else 1).")
@click.option("--backend", type=click.Choice(list(cluster_mod.BACKENDS)), default=None,
              help="local JVMs (the default) or docker compose. Default: $KAFKALAB_BACKEND, else what "
                   "the last up used, else local.")
@click.option("--timeout", "timeout_s", type=float, default=cluster_mod.UP_TIMEOUT_S, show_default=True,
              help="Seconds to wait for the cluster to serve.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def up(controllers: str | None, backend: str | None, timeout_s: float, as_json: bool) -> None:
    """Start the cluster (only what is not running) and wait until it serves."""
    t0 = time.monotonic()
    st = cluster_mod.up(controllers=int(controllers) if controllers else None, backend=backend, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(st.to_json(), indent=2))
    else:
        _print_status(st)
        click.echo(f"serving in {time.monotonic() - t0:.1f} s; bootstrap.servers={st.bootstrap_servers}")


@main.command()
def down() -> None:
    """Stop every node (brokers first); no process is left behind."""
    cluster_mod.down()
    click.echo("cluster stopped")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--check", is_flag=True, help="Exit 0 only if every node runs and 3 brokers serve (exit 3 otherwise).")
def status(as_json: bool, check: bool) -> None:
    """Show each node: pid, alive, paused, listeners, log dir."""
    st = cluster_mod.status()
    if check:
        serving = st.all_alive and len(cluster_mod.registered_brokers(st.bootstrap_servers)) == 3
        if not serving:
            click.echo("the cluster is not (fully) running", err=True)
            sys.exit(3)
    if as_json:
        click.echo(json.dumps(st.to_json(), indent=2))
    else:
        _print_status(st)


@main.command()
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds to wait for each step.")
def restore(timeout_s: float) -> None:
    """Make a broken cluster whole again: resume paused nodes, start killed or stopped ones,
    wait until every ISR is full, move leadership back to the preferred replicas."""
    before = cluster_mod.status()
    paused = [n.node_id for n in [*before.controllers.values(), *before.brokers.values()] if n.paused]
    down = [n.node_id for n in [*before.controllers.values(), *before.brokers.values()] if not n.alive]
    t0 = time.monotonic()
    cluster_mod.restore(timeout_s=timeout_s)
    click.echo(f"resumed {paused or 'none'}, started {down or 'none'}; whole in {time.monotonic() - t0:.1f} s")
    _print_status(cluster_mod.status())


def _print_status(st: cluster_mod.ClusterStatus) -> None:
    click.echo(f"Kafka {st.kafka_version}, backend: {st.backend}; quorum leader: {st.quorum_leader}")
    for n in [*st.controllers.values(), *st.brokers.values()]:
        state = "paused" if n.paused else ("up" if n.alive else "down")
        listeners = " ".join(f"{k}={v}" for k, v in n.listeners.items())
        click.echo(f"  {n.role:<10} {n.node_id:>3}  {state:<6} pid={n.pid or '-':<7} {listeners}")


def _node_command(name: str, doc: str):
    @main.command(name=name, help=doc)
    @click.argument("node_id", type=int)
    def cmd(node_id: int) -> None:
        getattr(cluster_mod, name)(node_id)
        click.echo(f"{name}: node {node_id} done")

    return cmd


_node_command("kill", "SIGKILL node ID: a crash, no controlled shutdown.")
_node_command("stop", "SIGTERM node ID and wait for its controlled shutdown.")
_node_command("start", "Start node ID and wait until it serves.")
_node_command("pause", "SIGSTOP node ID: alive, sockets open, silent.")
_node_command("resume", "SIGCONT a paused node.")


@main.command()
@click.argument("node_id", type=int)
@click.option("-n", "--lines", type=int, default=40, show_default=True)
def logs(node_id: int, lines: int) -> None:
    """Print the last log lines of node ID."""
    click.echo(cluster_mod.cluster().logs(node_id, lines))


@main.command()
@click.option("--yes", is_flag=True, help="Do not ask.")
def wipe(yes: bool) -> None:
    """Delete all node data and logs (cluster must be down): the next up formats afresh."""
    if not yes:
        click.confirm("Delete every topic and log of the cluster?", abort=True)
    cluster_mod.cluster().wipe()
    click.echo("wiped")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def tool(name: str, args: tuple[str, ...]) -> None:
    """Run Kafka's command-line tool NAME (e.g. kafka-topics) from the broker jars.

    --bootstrap-server is added for this cluster when the tool takes one and none is given.
    Known tools: run `kafkalab tool list`.
    """
    if name == "list":
        for t, cls in sorted(cluster_mod.TOOLS.items()):
            click.echo(f"{t:<30} {cls}")
        return
    cmd = cluster_mod.tool_command(name, args)
    sys.exit(subprocess.call(cmd))


# ----------------------------------------------------------------------------- experiments


def _whole_cluster_first(callback):
    """``callback`` preceded by the run precondition (``runscope.require_for_cli``): the
    cluster answers, every node is up (a node that is down is restarted, said on stderr so
    ``--json`` output stays clean) and every ISR is full; else one error line naming the fix."""
    @functools.wraps(callback)
    def checked(*args, **kwargs):
        runscope.require_for_cli()
        return callback(*args, **kwargs)

    checked.requires_whole_cluster = True
    return checked


class RunGroup(KafkalabGroup):
    """``kafkalab run``: every subcommand starts from a whole cluster. Each one's callback is
    wrapped when it is added, so the precondition runs after click has parsed and checked the
    options (``--help`` and usage errors need no cluster) and before anything that could hang.
    A callback that checks more of its arguments itself is marked
    ``runscope.checks_cluster_itself`` and calls the precondition after those checks."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        if cmd.callback is not None and not getattr(cmd.callback, "requires_whole_cluster", False):
            cmd.callback = _whole_cluster_first(cmd.callback)
        super().add_command(cmd, name)


@main.group(cls=RunGroup)
def run() -> None:
    """Run a notebook's experiment from the terminal (same code as the notebook).

    Each first makes sure the cluster is whole: it answers (else: `kafkalab up`), every node
    runs (a node that is down is restarted, and it says so), every ISR is full. Each takes
    --show: print the source of the client programs it runs before running them."""


def _parse_topic(value: str) -> tuple[str, int]:
    name, sep, parts = value.rpartition(":")
    if not sep or not name or not parts.isdigit() or int(parts) < 1:
        raise click.BadParameter(f"{value!r}: expected NAME:PARTITIONS, e.g. A:2")
    return name, int(parts)


@run.command("assignment")
@click.option("--consumers", type=click.IntRange(1, 50), required=True, help="Members in the group.")
@click.option("--topic", "topics", multiple=True, required=True, metavar="NAME:PARTITIONS",
              help="A topic to create and subscribe to; repeat for more.")
@click.option("--strategy", type=click.Choice(["range", "roundrobin", "cooperative-sticky"]),
              help="Classic protocol, client-side assignor (librdkafka partition.assignment.strategy).")
@click.option("--group-protocol", type=click.Choice(["classic", "consumer"]), default=None,
              help="consumer = KIP-848, the broker assigns (needs --remote-assignor or its default uniform).")
@click.option("--remote-assignor", type=click.Choice(["uniform", "range"]), default=None,
              help="KIP-848 broker-side assignor (group.remote.assignor).")
@click.option("--run-prefix", default=None, help="Topic name prefix; topics are PREFIX-NAME. Default: unique per run.")
@click.option("--timeout", "timeout_s", type=float, default=30.0, show_default=True)
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def run_assignment_cmd(consumers: int, topics: tuple[str, ...], strategy: str | None, group_protocol: str | None,
                       remote_assignor: str | None, run_prefix: str | None, timeout_s: float, as_json: bool) -> None:
    """Real consumers in a real group on fresh topics: who gets which partition. The members run
    notebook 01's programs ``member`` (classic) or ``kip848_member`` (KIP-848), read from the
    notebook, with the assignor line set as asked (``assignment.member_program``)."""
    from .experiments.assignment import Assignor, notebook_programs, run_assignment

    parsed = dict(_parse_topic(t) for t in topics)
    if len(parsed) != len(topics):
        raise click.BadParameter("topic names must be different", param_hint="--topic")
    protocol = group_protocol or ("consumer" if remote_assignor else "classic")
    if protocol == "consumer":
        if strategy:
            raise click.UsageError("--strategy is for the classic protocol; with --group-protocol consumer use --remote-assignor")
        assignor = Assignor(strategy=None, group_protocol="consumer", remote_assignor=remote_assignor or "uniform")
    else:
        if remote_assignor:
            raise click.UsageError("--remote-assignor needs --group-protocol consumer")
        assignor = Assignor(strategy=strategy or "range")
    runscope.require_for_cli()
    program = notebook_programs([assignor.label])[assignor.label]
    show_programs(program)
    result = run_assignment(consumers, parsed, assignor, run_prefix=run_prefix, timeout_s=timeout_s, program=program)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(f"{result.assignor}: {consumers} consumers, topics {parsed}, stable after {result.elapsed_ms} ms")
        for name, parts in result.short().items():
            click.echo(f"  {name}: {', '.join(parts) or '(idle)'}")


#: Experiment modules under kafkalab.experiments that define ``cli_command`` (a click.Command
#: named like the experiment, e.g. "rebalance"), or ``cli_commands`` (several); each becomes
#: ``kafkalab run <name>``.
EXPERIMENT_MODULES = ("tour", "rebalance", "offset_commit", "idempotence", "transactions", "segments_demo",
                      "ordering", "replication", "replication_scenarios", "share_groups", "performance",
                      "late_txn", "outbox", "stalled_partition")


def _register_experiments() -> None:
    import importlib

    for mod in EXPERIMENT_MODULES:
        try:
            module = importlib.import_module(f"kafkalab.experiments.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"kafkalab.experiments.{mod}":
                continue  # not written yet
            raise
        for command in getattr(module, "cli_commands", None) or [getattr(module, "cli_command", None)]:
            if command is not None:
                run.add_command(command)


_register_experiments()


def _batch_line(b) -> str:
    flags = "".join(f for f, on in (("T", b.is_transactional), ("C", b.is_control)) if on) or "-"
    ctl = f" {b.control.type}" if b.control else ""
    return (f"  @{b.position:<9} offsets {b.base_offset}-{b.last_offset} ({b.records_count}) "
            f"size {b.size} pid {b.producer_id} epoch {b.producer_epoch} seq {b.base_sequence} "
            f"{b.compression} flags {flags}{ctl} maxTs {b.max_timestamp}")


@main.command("segments")
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="Partition number.")
@click.option("--broker", type=int, default=None,
              help="Broker id whose replica to read (default: the partition's leader).")
@click.option("--no-verify", is_flag=True, help="Do not fail on a batch whose CRC-32C does not match.")
@click.option("--json", "as_json", is_flag=True, help="Print every segment, batch and index entry as JSON.")
def segments_command(topic: str, partition: int, broker: int | None, no_verify: bool, as_json: bool) -> None:
    """Read a partition replica's segment files (.log, .index, .timeindex) from disk.

    Batches are checked against their CRC-32C. --json prints {"segments": [{"file",
    "base_offset", "batches": [...], "index": [...], "timeindex": [...]}]} with absolute offsets.
    """
    from . import coordinators, segments

    if broker is None:  # the leader if the cluster answers, else any broker holding a replica
        broker = coordinators.partition_leader(topic, partition)
    broker_id, folder = segments.replica_dir(topic, partition, broker)
    segs = segments.read_partition(folder, records=not as_json, verify=not no_verify)
    if as_json:
        out = {"topic": topic, "partition": partition, "broker": broker_id, **segments.partition_json(segs)}
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"{topic}-{partition} on broker {broker_id}: {folder}")
    for s in segs:
        click.echo(f"{s.log.name}: {len(s.batches)} batches, offsets {s.base_offset}-{s.next_offset - 1}, "
                   f"{s.size} bytes, {len(s.index)} index and {len(s.timeindex)} time index entries"
                   + (f", {s.trailing_bytes} bytes of a batch being written" if s.trailing_bytes else ""))
        for b in s.batches:
            click.echo(_batch_line(b))


def _register_groups() -> None:
    """Top-level command groups that live beside their module (``kafkalab fault ...``)."""
    from .faults_cli import cli_group as fault_group
    from .i18n import cli_group as i18n_group

    main.add_command(fault_group)
    main.add_command(i18n_group)


_register_groups()


if __name__ == "__main__":  # pragma: no cover
    main()
