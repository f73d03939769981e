"""Reproduce the librdkafka 2.16.0 abort of an AdminClient whose group request timed out
while its coordinator was down, and show the rule kafkalab follows that avoids it.

    .venv/bin/python benchmarks/librdkafka_admin_abort.py [--rounds 3] [--mode raw|kafkalab]

Each round runs one child process that:

1. commits an offset for a new group and describes it once (its AdminClient now caches the
   group's coordinator, broker B);
2. SIGKILLs broker B;
3. sends DescribeGroups for the group and lets it end after 1 s:
   - ``raw``: librdkafka's own timer ends it (``request_timeout=1``), the way most code
     calls the AdminClient;
   - ``kafkalab``: ``kafkalab.workloads.group_request`` (librdkafka's timer at its maximum,
     ``ADMIN_GROUP_OPTIONS``; the caller stops waiting after 1 s);
4. restarts broker B and keeps its AdminClient alive 10 s more.

What was seen (librdkafka 2.16.0 in confluent-kafka 2.16.1): in ``raw`` mode the child
dies of SIGABRT with ``rdkafka_queue.h:1086: rd_kafka_enq_once_del_source_return:
Assertion `eonce->refcnt > 0' failed`` when broker B comes back. Read in librdkafka's
``src/rdkafka_admin.c`` and ``src/rdkafka_coord.c``: the timed-out request's owner drops
its reference to the request's enqueue-once (``rd_kafka_enq_once_destroy``); the pending
coordinator request (``rd_kafka_coord_req``) still holds one; when the coordinator comes
up, ``rd_kafka_admin_coord_request`` drops that last reference (the eonce is freed) and
returns ``ERR__DESTROY``; ``rd_kafka_coord_req_fsm`` then fails the request, which calls
``rd_kafka_admin_coord_response_parse`` with the freed eonce: a use after free.

Prints one JSON object: per round the child's exit code and the assertion line if any.
Kills and restarts a broker: do not run it while notebooks or tests use the cluster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from kafkalab import cluster, config, runscope

CHILD = r"""
import sys, time
from confluent_kafka import KafkaException
from kafkalab import cluster, config, coordinators, workloads
from kafkalab.runscope import run_id

mode, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
from kafkalab import admin as kadmin
kadmin.create_topics({topic: 1})
coordinators.commit_offset(group, topic, 0, 0)
a = workloads.admin()
b = a.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id
print("coordinator", b, flush=True)
cluster.kill(b)
t0 = time.monotonic()
try:
    if mode == "raw":
        a.describe_consumer_groups([group], request_timeout=1)[group].result(timeout=30)
    else:
        workloads.group_request(lambda o: a.describe_consumer_groups([group], **o), 1.0, group)
    print("answered", flush=True)
except (KafkaException, TimeoutError) as e:
    print("ended after %.1f s: %r" % (time.monotonic() - t0, e), flush=True)
cluster.start(b)
print("broker", b, "back", flush=True)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    a.poll(0.5)
print("alive", flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", choices=["raw", "kafkalab"], default="raw")
    args = ap.parse_args()
    runscope.require_whole_cluster()
    rounds = []
    for i in range(args.rounds):
        rid = runscope.run_id()
        group, topic = f"eonce-{rid}-g", f"eonce-{rid}-t"
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", CHILD, args.mode, group, topic],
                           capture_output=True, text=True, timeout=180)
        cluster.restore(timeout_s=60)
        out = (p.stdout + p.stderr).splitlines()
        rounds.append({"round": i, "exit_code": p.returncode, "seconds": round(time.monotonic() - t0, 1),
                       "assertion": next((l for l in out if "Assertion" in l), None),
                       "log": [l for l in out if not l.startswith(" ")][-6:]})
        from kafkalab import admin
        admin.delete_groups([group])
        admin.delete_topics([topic])
    print(json.dumps({"mode": args.mode, "bootstrap": config.bootstrap_servers(), "rounds": rounds,
                      "aborted": sum(r["exit_code"] == -6 for r in rounds),
                      "alive_to_the_end": sum(r["exit_code"] == 0 for r in rounds)}, indent=1))


if __name__ == "__main__":
    main()
