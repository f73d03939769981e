"""How long `kafkalab up` and `kafkalab down` take on this machine.

    .venv/bin/python benchmarks/cluster_up.py [--rounds 3] [--fresh]

Each round: down, then up (timed until 3 brokers are registered and the quorum has a
leader), then down (timed until no process is left). With --fresh the first round wipes
node storage first, so it includes formatting. Prints one JSON object with every sample
and the medians, in seconds. The cluster is left running if it was running before.
Stops the cluster it measures: do not run it while notebooks or tests use the cluster.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import psutil

from kafkalab import cluster, config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fresh", action="store_true", help="wipe storage before the first round")
    args = ap.parse_args()

    c = cluster.LocalCluster()
    was_running = any(n.alive for n in c.status().brokers.values())
    c.down()
    samples: dict[str, list[float]] = {"up_fresh": [], "up": [], "down": []}
    for i in range(args.rounds):
        fresh = args.fresh and i == 0
        if fresh:
            c.wipe()
        t0 = time.monotonic()
        c.up()
        samples["up_fresh" if fresh else "up"].append(round(time.monotonic() - t0, 2))
        t0 = time.monotonic()
        c.down()
        samples["down"].append(round(time.monotonic() - t0, 2))
        mine = str(config.cluster_dir())  # this cluster's nodes only (another may run beside it)
        left = [p.pid for p in psutil.process_iter(["cmdline"])
                if any("-Dkafkalab.node=" in a for a in (p.info["cmdline"] or []))
                and any(a.startswith(mine) for a in (p.info["cmdline"] or []))]
        assert not left, f"processes left after down: {left}"
    if was_running:
        c.up()
    print(json.dumps({
        "machine": {"cpus": psutil.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
                    "python": platform.python_version()},
        "samples_s": samples,
        "median_s": {k: statistics.median(v) for k, v in samples.items() if v},
    }, indent=2))


if __name__ == "__main__":
    main()
