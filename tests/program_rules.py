"""What a client program must do to be pasted into a service (STYLE.md, "Code"), read with ``ast``.

Each rule takes a program's source and returns its findings, one sentence each (empty: the rule
holds). tests/test_programs.py applies them to every ``%%program`` cell and plants each mistake
once, so no rule is a check that cannot fail.

- ``consumer_errors``: a consumer program never drops what ``poll()``/``consume()`` returns, and
  it tests ``msg.error()`` in an ``if`` whose block raises (a fatal error) or says why it goes
  on (a ``print``/``logging`` call: a transient error librdkafka recovers from by itself).
- ``flush_checked``: the number ``flush()`` returns (records still queued) is used, never dropped.
- ``buffer_error``: a ``produce()`` in a tight loop (one that does not ``flush()`` each time
  round) sits in a ``try`` that handles ``BufferError`` (librdkafka's local queue is full:
  ``queue.buffering.max.messages``), within that loop.
- ``purged_before_raise``: a program that gives up on records ``flush()`` left queued (an ``if``
  on its result that raises) calls the producer's ``purge()`` first: else its ``close()`` waits
  for them up to ``message.timeout.ms`` (librdkafka CONFIGURATION.md; 300000 ms by default),
  measured in shared/FACTS.md.
- ``closed_in_finally``: each ``Consumer``/``ShareConsumer``/``Producer`` a program builds has its
  ``close()`` called in a ``finally`` block.
- ``instrument_acts``: for the lab's instruments: no call of a client method that changes what
  Kafka does (produce, flush, commit, store offsets, transactions, acknowledge, assign, seek...).
"""

from __future__ import annotations

import ast

CLIENTS = {"Consumer", "ShareConsumer", "Producer"}
CONSUMERS = {"Consumer", "ShareConsumer"}
#: Client methods that change what Kafka does or what the client will do next (confluent-kafka
#: 2.16: Producer, Consumer, ShareConsumer).
ACTING = {"produce", "produce_batch", "flush", "purge", "poll", "consume", "commit", "commit_sync",
          "commit_async", "store_offsets", "init_transactions", "begin_transaction",
          "send_offsets_to_transaction", "commit_transaction", "abort_transaction", "acknowledge",
          "acknowledge_offset", "assign", "incremental_assign", "incremental_unassign", "unassign",
          "subscribe", "unsubscribe", "seek", "pause", "resume", "close"}


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _receiver(node: ast.Call) -> str:
    """The dotted text of what a method is called on (``self.ledger`` for self.ledger.flush())."""
    return ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else ""


def _clients(tree: ast.AST) -> dict[str, str]:
    """Variable name -> class, for each ``x = Consumer(...)`` (or ShareConsumer, Producer)."""
    found = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and _call_name(node.value) in CLIENTS):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = _call_name(node.value)
    return found


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def consumer_errors(source: str) -> list[str]:
    tree = ast.parse(source)
    consumers = {n for n, cls in _clients(tree).items() if cls in CONSUMERS}
    if not consumers:
        return []
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and _call_name(node.value) in ("poll", "consume") and _receiver(node.value) in consumers):
            out.append(f"line {node.lineno}: what {ast.unparse(node.value)} returns is dropped: "
                       "a record or an error goes unseen")
    handled = False
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(isinstance(c, ast.Call) and _call_name(c) == "error"
                                            for c in ast.walk(node.test)):
            body = [n for stmt in node.body for n in ast.walk(stmt)]
            raises = any(isinstance(n, ast.Raise) for n in body)
            says = any(isinstance(n, ast.Call) and (_call_name(n) == "print" or _receiver(n) in ("logging", "log", "logger"))
                       for n in body)
            if not (raises or says):
                out.append(f"line {node.lineno}: msg.error() is tested but its block neither raises "
                           "nor says why it goes on")
            handled = True
    if not handled:
        out.append("no `if msg.error():` that raises a fatal error or says why it goes on")
    return out


def flush_checked(source: str) -> list[str]:
    tree = ast.parse(source)
    producers = {n for n, cls in _clients(tree).items() if cls == "Producer"}
    return [f"line {node.lineno}: {ast.unparse(node.value)} drops the number of records still queued"
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and _call_name(node.value) == "flush" and _receiver(node.value) in producers]


def buffer_error(source: str) -> list[str]:
    tree = ast.parse(source)
    producers = {n for n, cls in _clients(tree).items() if cls == "Producer"}
    parents = _parents(tree)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _call_name(node) == "produce" and _receiver(node) in producers):
            continue
        loop = None
        guarded = False
        up = parents.get(node)
        while up is not None and loop is None:
            if isinstance(up, ast.Try) and any(
                    h.type is not None and "BufferError" in ast.unparse(h.type) for h in up.handlers):
                guarded = True
            if isinstance(up, (ast.For, ast.While)):
                loop = up
            up = parents.get(up)
        waits = loop is not None and any(isinstance(c, ast.Call) and _call_name(c) == "flush"
                                         for stmt in loop.body for c in ast.walk(stmt))
        if loop is not None and not waits and not guarded:
            out.append(f"line {node.lineno}: produce() in a loop without `except BufferError` "
                       "(the local queue is full: serve reports with poll(), then produce again)")
    return out


def purged_before_raise(source: str) -> list[str]:
    tree = ast.parse(source)
    producers = {n for n, cls in _clients(tree).items() if cls == "Producer"}
    flushed: dict[str, str] = {}  # a name assigned from flush() -> the producer
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and _call_name(node.value) == "flush"
                and _receiver(node.value) in producers):
            flushed[node.targets[0].id] = _receiver(node.value)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if isinstance(test, ast.Name) and test.id in flushed:
            who = flushed[test.id]
        elif isinstance(test, ast.Call) and _call_name(test) == "flush" and _receiver(test) in producers:
            who = _receiver(test)
        else:
            continue
        raises = [i for i, stmt in enumerate(node.body) if isinstance(stmt, ast.Raise)]
        purged = [i for i, stmt in enumerate(node.body) for c in ast.walk(stmt)
                  if isinstance(c, ast.Call) and _call_name(c) == "purge" and _receiver(c) == who]
        if raises and not (purged and min(purged) < raises[0]):
            out.append(f"line {node.lineno}: gives up on what flush() left queued without {who}.purge() "
                       "first (close() would wait for those records up to message.timeout.ms)")
    return out


def closed_in_finally(source: str) -> list[str]:
    tree = ast.parse(source)
    closed = {_receiver(c) for node in ast.walk(tree) if isinstance(node, ast.Try)
              for stmt in node.finalbody for c in ast.walk(stmt)
              if isinstance(c, ast.Call) and _call_name(c) == "close"}
    return [f"{name} = {cls}(...) is never closed in a `finally` block"
            for name, cls in _clients(tree).items() if name not in closed]


def instrument_acts(source: str) -> list[str]:
    """Calls of a Kafka client method that acts (``ACTING``) on anything but the instrument's own
    ledger or files (``self.ledger.flush()``, ``f.close()``: receivers named ledger/file/f/fh)."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ACTING:
            who = _receiver(node)
            if who.startswith("open(") or who.split(".")[-1] in ("ledger", "file", "f", "fh", "out", "stream", "sys.stderr", "stderr",
                                      "self", "super()", "_stop", "self._stop", "pool", "executor"):
                continue
            out.append(f"line {node.lineno}: {ast.unparse(node.func)}()")
    return out


RULES = {"consumer_errors": consumer_errors, "flush_checked": flush_checked,
         "buffer_error": buffer_error, "purged_before_raise": purged_before_raise,
         "closed_in_finally": closed_in_finally}
