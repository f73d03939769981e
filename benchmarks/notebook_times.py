"""How long each notebook takes and how much memory one learner's set-up holds, as JSON:
the numbers behind the workshop guide (notebooks/workshop_guide.md).

    .venv/bin/python benchmarks/notebook_times.py [--notebooks 00 03 ...] [--out FILE]

Runs each notebook top to bottom in a fresh kernel (nbclient, as JupyterLab's "Run All"
does) against the running cluster (`kafkalab up`; `KAFKALAB_PORT_BASE`/`KAFKALAB_STATE` pick
which one), one after another, and samples twice a second the resident memory (RSS) of the
cluster's JVMs (controller and brokers, from `kafkalab status`) and of the kernel with its
children (the Spark JVM, worker processes). Prints one JSON object: the machine (cores,
memory, load average before and after each notebook), then per notebook its wall time (s),
whether it passed, and the peak RSS of the cluster and of the kernel tree (MB). Nothing is
asserted: a loaded machine is slower, and the load averages say how loaded it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from kafkalab import cluster

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def tree_rss(pids: list[int]) -> int:
    """Bytes resident in ``pids`` and all their descendants (processes that vanish are skipped)."""
    seen: set[int] = set()
    total = 0
    for pid in pids:
        try:
            procs = [psutil.Process(pid)]
            procs += procs[0].children(recursive=True)
        except psutil.Error:
            continue
        for p in procs:
            if p.pid in seen:
                continue
            seen.add(p.pid)
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
    return total


class Sampler(threading.Thread):
    """Peak RSS of the cluster's JVMs and of a kernel's process tree, sampled every 0.5 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.kernel_pid: int | None = None
        self.peak_cluster = 0
        self.peak_kernel = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            st = cluster.status()
            pids = [n.pid for n in (*st.brokers.values(), *st.controllers.values()) if n.pid]
            self.peak_cluster = max(self.peak_cluster, tree_rss(pids))
            if self.kernel_pid:
                self.peak_kernel = max(self.peak_kernel, tree_rss([self.kernel_pid]))

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def run_one(path: Path, cell_timeout_s: int) -> dict:
    nb = nbformat.read(path, as_version=4)
    sampler = Sampler()
    client = NotebookClient(nb, timeout=cell_timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    error = None
    sampler.start()
    try:
        with client.setup_kernel():
            sampler.kernel_pid = client.km.provisioner.process.pid if client.km.provisioner else None
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
    except CellExecutionError as e:
        error = str(e).splitlines()[-1][:300] if str(e) else "cell failed"
    finally:
        sampler.stop()
    return {"notebook": path.name, "seconds": round(time.monotonic() - t0, 1), "passed": error is None,
            "error": error, "peak_cluster_rss_mb": round(sampler.peak_cluster / 2**20),
            "peak_kernel_tree_rss_mb": round(sampler.peak_kernel / 2**20),
            "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notebooks", nargs="*", default=None, help="numbers, e.g. 00 03 (default: all)")
    ap.add_argument("--cell-timeout", type=int, default=300, help="seconds per cell")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = ap.parse_args()
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.notebooks:
        paths = [p for p in paths if p.name[:2] in set(args.notebooks)]
        if not paths:
            ap.error(f"no notebook numbered {args.notebooks} in {NOTEBOOKS}")
    if not cluster.status().all_alive:
        ap.error("the cluster is not whole: run `kafkalab up` (or `kafkalab restore`) first")
    result = {"machine": {"platform": platform.platform(), "cores": os.cpu_count(),
                          "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)},
              "notebooks": []}
    for p in paths:
        row = run_one(p, args.cell_timeout)
        result["notebooks"].append(row)
        print(json.dumps(row), flush=True)
    result["total_seconds"] = round(sum(r["seconds"] for r in result["notebooks"]), 1)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
