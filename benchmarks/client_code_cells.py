"""How many code cells of each notebook show Kafka client code, as JSON: the count behind
issue 23 ("at least a third of each notebook's code cells call the client API").

    .venv/bin/python benchmarks/client_code_cells.py [NOTEBOOK.ipynb ...] [--rev GIT_REV]

Each code cell is put in one class, the first that fits:

- ``client``: a ``%%program`` cell (a client program, run as shown), or a cell that calls a
  confluent-kafka constructor (``Producer``, ``Consumer``, ``ShareConsumer``, ``AdminClient``...)
  or a method of an object such a constructor made in that notebook (``consumer.poll(...)``,
  ``admin.describe_topics(...)``), or a confluent-kafka client method (``CLIENT_METHODS``)
  on anything that is not a kafkalab module (``producer.init_transactions()``);
- ``experiment``: a cell that calls into ``kafkalab.experiments`` (a name imported from it);
- ``check``: everything else (asserts, tables, plots, set-up, clean-up).

``strict`` counts again by a narrower rule: a ``%%program`` cell, or a cell that itself
constructs a confluent-kafka client; a method call on a client made in another cell does not
count. ``strict_share`` is that count over the code cells.

A heuristic read of the source (nothing runs); ``--rev`` reads the notebooks as committed at a
git revision, for a before/after comparison. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
CONSTRUCTORS = ("Producer", "Consumer", "ShareConsumer", "AdminClient", "SerializingProducer",
                "DeserializingConsumer")
CONSTRUCTED = re.compile(r"^\s*(\w+)\s*=\s*(?:confluent_kafka\.)?(?:admin\.)?(" + "|".join(CONSTRUCTORS) + r")\(", re.M)
CALLS_CONSTRUCTOR = re.compile(r"(?<![\w.])(?:confluent_kafka\.)?(" + "|".join(CONSTRUCTORS) + r")\(")
EXPERIMENT_IMPORT = re.compile(r"from kafkalab\.experiments import (\w+)(?: as (\w+))?")
#: Methods of confluent-kafka's clients (2.16): a call of one on anything but a kafkalab module counts.
CLIENT_METHODS = ("produce", "poll", "consume", "flush", "commit", "store_offsets", "subscribe", "assign",
                  "incremental_assign", "incremental_unassign", "unassign", "committed", "position", "seek",
                  "get_watermark_offsets", "offsets_for_times", "init_transactions", "begin_transaction",
                  "send_offsets_to_transaction", "commit_transaction", "abort_transaction",
                  "consumer_group_metadata", "acknowledge", "commit_sync", "commit_async", "memberid",
                  "describe_consumer_groups", "list_consumer_group_offsets", "describe_topics", "describe_configs",
                  "list_offsets", "describe_cluster", "list_topics")
KAFKALAB_NAMES = re.compile(r"^\s*(?:from kafkalab(?:\.\w+)* import (.+)|import kafkalab(?:\.\w+)*(?: as (\w+))?)", re.M)


def classify(sources: list[str]) -> dict[str, int]:
    """``{"client": n, "experiment": n, "check": n}`` for the code cells ``sources`` of one notebook."""
    clients = {m.group(1) for s in sources for m in CONSTRUCTED.finditer(s)}
    experiments = {m.group(2) or m.group(1) for s in sources for m in EXPERIMENT_IMPORT.finditer(s)}
    lab_names = {"kafkalab"}
    for s in sources:
        for m in KAFKALAB_NAMES.finditer(s):
            if m.group(2):
                lab_names.add(m.group(2))
            for part in (m.group(1) or "").strip("()").split(","):
                words = part.split()
                if words:
                    lab_names.add(words[-1])
    method_call = re.compile(r"(?<![\w.])(\w+)\.(" + "|".join(CLIENT_METHODS) + r")\(")
    counts = {"client": 0, "experiment": 0, "check": 0}
    for s in sources:
        body = "\n".join(line for line in s.splitlines() if not line.lstrip().startswith(("import ", "from ")))
        if s.lstrip().startswith("%%program") or CALLS_CONSTRUCTOR.search(body) or any(
                re.search(rf"(?<![\w.]){re.escape(c)}\.\w+\(", body) for c in clients) or any(
                m.group(1) not in lab_names for m in method_call.finditer(body)):
            counts["client"] += 1
        elif any(re.search(rf"(?<![\w.]){re.escape(e)}\.\w+", body) for e in experiments):
            counts["experiment"] += 1
        else:
            counts["check"] += 1
    return counts


def strict(sources: list[str]) -> int:
    """How many of ``sources`` are a ``%%program`` cell or construct a confluent-kafka client."""
    return sum(s.lstrip().startswith("%%program") or bool(CALLS_CONSTRUCTOR.search(
        "\n".join(line for line in s.splitlines() if not line.lstrip().startswith(("import ", "from ")))))
        for s in sources)


def code_cells(path: Path, rev: str | None) -> list[str]:
    text = path.read_text() if rev is None else subprocess.run(
        ["git", "show", f"{rev}:{path.relative_to(ROOT)}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--rev", help="read the notebooks at this git revision")
    args = ap.parse_args()
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    out = {}
    for p in paths:
        try:
            cells = code_cells(p, args.rev)
        except subprocess.CalledProcessError:  # not in the tree at --rev (a notebook added since)
            continue
        c = classify(cells)
        total = sum(c.values())
        n = strict(cells)
        out[p.stem] = c | {"code_cells": total, "client_share": round(c["client"] / total, 2) if total else 0.0,
                           "strict": n, "strict_share": round(n / total, 2) if total else 0.0}
    seven = [k for k in out if k[:2] in ("00", "01", "02", "06", "07", "08", "10")]
    if len(seven) > 1:
        n, total = sum(out[k]["strict"] for k in seven), sum(out[k]["code_cells"] for k in seven)
        out["issue 24's seven"] = {"strict": n, "code_cells": total, "strict_share": round(n / total, 2)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
