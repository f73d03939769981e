"""``kafkalab fault``: the fault proxy (``kafkalab.faults``) from a terminal.

``kafkalab fault serve`` runs a ``FaultProxy`` in the foreground with a control socket
(``control_socket_path``); the other commands (``drop-acks``, ``blackhole``, ``add``, ``cut``,
``hold``, ``release``, ``clear``, ``status``, ``events``) send it one JSON command each
(``send_control``) and print its reply.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path

import click

from . import config
from .clickutil import KafkalabGroup
from .errors import KafkalabError
from .faults import ACTIONS, COUNTERS, FaultProxy, Rule

def control_socket_path() -> Path:
    """Where ``kafkalab fault serve`` listens for the other ``kafkalab fault`` commands."""
    return config.state_dir() / "faults" / "control.sock"


def send_control(cmd: dict, timeout_s: float = 5.0) -> dict:
    """Send one command to the proxy of ``kafkalab fault serve`` and return its reply.

    Raises:
        KafkalabError: no proxy serves (start ``kafkalab fault serve``), or it refused the command.
    """
    path = control_socket_path()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(path))
            s.sendall((json.dumps(cmd) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise KafkalabError(f"no fault proxy is serving (no {path}); start one: kafkalab fault serve") from None
    reply = json.loads(data)
    if not reply.get("ok"):
        raise KafkalabError(f"fault proxy refused {cmd.get('op')}: {reply.get('error')}")
    return reply


@click.group("fault", cls=KafkalabGroup)
def cli_group() -> None:
    """The fault proxy between clients and brokers (ports 9096/9196/9296 -> FAULT listeners).

    Run `kafkalab fault serve` in one terminal; in another, point a client at
    127.0.0.1:9096,127.0.0.1:9196,127.0.0.1:9296 and add rules: `kafkalab fault drop-acks 2`,
    `kafkalab fault blackhole --broker 2`, `kafkalab fault hold --api EndTxn` then
    `kafkalab fault release`, `kafkalab fault status`, `kafkalab fault clear`.
    """


def _print_stats(rows: list[dict]) -> None:
    if not rows:
        click.echo("  (no traffic)")
    for r in rows:
        shown = ", ".join(f"{c}={r[c]}" for c in COUNTERS if r[c])
        click.echo(f"  broker {r['broker']} {r['api']}: {shown}")


@cli_group.command("serve")
@click.option("--broker", "brokers", type=int, multiple=True, help="Proxy only these brokers (default all).")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds (default: until Ctrl-C).")
@click.option("--json", "as_json", is_flag=True, help="Print the final counters as JSON.")
def serve_cmd(brokers: tuple[int, ...], duration: float | None, as_json: bool) -> None:
    """Run the proxy in the foreground until Ctrl-C (or --duration); print counters at exit."""
    proxy = FaultProxy(brokers or None, control_socket=control_socket_path())
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if threading.current_thread() is threading.main_thread() else None
    with proxy:
        if not as_json:
            for b, n in proxy.nodes.items():
                click.echo(f"broker {b}: 127.0.0.1:{n.fault_proxy_port} -> 127.0.0.1:{n.ports['FAULT']}")
            click.echo(f"bootstrap.servers={proxy.bootstrap_servers}; rules: kafkalab fault --help")
        try:
            stop.wait(duration)
        except KeyboardInterrupt:
            pass
        table = proxy.stats_table()
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        click.echo(json.dumps({"stats": table}, indent=2))
    else:
        click.echo("fault proxy stopped; counters:")
        _print_stats(table)


def _add(rule: Rule) -> None:
    r = send_control({"op": "add", "rule": rule.to_json()})["rule"]
    click.echo(f"added rule: {r['name']}")


@cli_group.command("drop-acks")
@click.argument("count", type=click.IntRange(1))
@click.option("--every", type=click.IntRange(1), default=2, show_default=True,
              help="Lose one ack in EVERY Produce requests (2: each lost ack's retry gets through).")
@click.option("--skip", type=click.IntRange(0), default=0, help="Produce requests to let through first.")
@click.option("--broker", "brokers", type=int, multiple=True, help="Only requests to these brokers.")
@click.option("--client-id", default=None, help="Only requests of this client.id.")
def drop_acks_cmd(count: int, every: int, skip: int, brokers: tuple[int, ...], client_id: str | None) -> None:
    """Forward COUNT Produce requests but drop their responses (the broker wrote; the client never hears)."""
    _add(Rule("drop_response", "Produce", brokers or None, client_id, skip=skip, every=every, times=count))


@cli_group.command("blackhole")
@click.option("--broker", "brokers", type=int, multiple=True, required=True, help="Broker(s) to silence.")
@click.option("--api", default="Produce", show_default=True, help="Api to swallow (name or key).")
def blackhole_cmd(brokers: tuple[int, ...], api: str) -> None:
    """Swallow every API request to the broker(s): no forward, no answer, until `fault clear`."""
    _add(Rule("drop_request", api, brokers))


@cli_group.command("add")
@click.argument("action", type=click.Choice(list(ACTIONS)))
@click.option("--api", default="Produce", show_default=True)
@click.option("--broker", "brokers", type=int, multiple=True)
@click.option("--client-id", default=None)
@click.option("--skip", type=click.IntRange(0), default=0)
@click.option("--every", type=click.IntRange(1), default=1)
@click.option("--times", type=click.IntRange(0), default=None, help="Most applications (default: no limit).")
@click.option("--delay-ms", type=click.IntRange(0), default=0)
def add_cmd(action: str, api: str, brokers: tuple[int, ...], client_id: str | None, skip: int, every: int,
            times: int | None, delay_ms: int) -> None:
    """Add any rule (see kafkalab.faults.Rule): drop_response, drop_request, delay_request,
    delay_response, cut, cut_at_response, hold_request."""
    _add(Rule(action, api, brokers or None, client_id, skip=skip, every=every, times=times, delay_ms=delay_ms))


@cli_group.command("cut")
@click.option("--broker", type=int, default=None, help="Only this broker's connections (default all).")
def cut_cmd(broker: int | None) -> None:
    """Close the proxied connections now; clients reconnect through the proxy."""
    n = send_control({"op": "cut", "broker": broker})["cut"]
    click.echo(f"cut {n} connection(s)")


@cli_group.command("hold")
@click.option("--api", default="EndTxn", show_default=True, help="Api of the request to hold (name or key).")
@click.option("--client-id", default=None, help="Only requests of this client.id.")
@click.option("--skip", type=click.IntRange(0), default=0, help="Matching requests to let through first.")
def hold_cmd(api: str, client_id: str | None, skip: int) -> None:
    """Hold the next API request from the broker until `kafkalab fault release` (KAFKA-17754's late request)."""
    _add(Rule("hold_request", api, None, client_id, skip=skip, times=1))


@cli_group.command("release")
@click.option("--timeout", "timeout_s", type=float, default=30.0, show_default=True,
              help="Seconds to wait for the broker's answer to each.")
def release_cmd(timeout_s: float) -> None:
    """Deliver every held request to its broker now, late, and print the broker's answers."""
    released = send_control({"op": "release", "timeout_s": timeout_s}, timeout_s=timeout_s + 5)["released"]
    if not released:
        click.echo("nothing was held")
    for h in released:
        txn = h["txn"] or {}
        answer = (h["answer"] or {}).get("error", "not decoded")
        click.echo(f"{h['api']} v{h['api_version']} of {h['client_id']} (transactional.id {txn.get('transactional_id')}, "
                   f"epoch {txn.get('producer_epoch')}), held {h['held_ms']:.0f} ms, released {h['released_ms']:.0f} ms: "
                   f"broker answered {answer}")


@cli_group.command("clear")
def clear_cmd() -> None:
    """Remove every rule: the proxy forwards everything."""
    send_control({"op": "clear"})
    click.echo("rules cleared")


@cli_group.command("status")
@click.option("--json", "as_json", is_flag=True)
def status_cmd(as_json: bool) -> None:
    """Rules (with how often each applied) and counters per broker and api."""
    reply = send_control({"op": "status"})
    if as_json:
        click.echo(json.dumps(reply, indent=2))
        return
    click.echo(f"serving {reply['bootstrap_servers']}")
    for r in reply["rules"] or []:
        click.echo(f"  rule {r['name']}: matched {r['seen']}, applied {r['applied']}")
    if not reply["rules"]:
        click.echo("  no rules")
    _print_stats(reply["stats"])


@cli_group.command("events")
@click.option("--last", type=click.IntRange(1), default=20, show_default=True)
@click.option("--api", default="Produce", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def events_cmd(last: int, api: str, as_json: bool) -> None:
    """The last requests and responses of API the proxy saw, with what it did."""
    evs = send_control({"op": "events", "last": last, "api": api})["events"]
    if as_json:
        click.echo(json.dumps(evs, indent=2))
        return
    for e in evs:
        detail = ""
        if e["batches"]:
            detail = " ".join(f"p{b['partition']} pid={b['producer_id']} seq={b['base_sequence']} n={b['record_count']}"
                              for b in e["batches"])
        if e["results"]:
            detail = " ".join(f"p{r['partition']} {r['error']} offset={r['base_offset']}" for r in e["results"])
        click.echo(f"{e['t_ms']:>10.1f} ms  broker {e['broker']} conn {e['conn']} {e['kind']:<8} "
                   f"{e['api']} v{e['api_version']} corr={e['correlation_id']} {e['action']:<9} {detail}")
