"""What each knob costs on this machine: notebook 10's measurements with larger sizes, as JSON.

    .venv/bin/python benchmarks/performance.py [--messages 500000] [--rounds 2] [--out FILE]
        [--consumer-messages 50000] [--no-serving] [--markdown]

Runs against the running cluster (`kafkalab up`), alternating the settings `--rounds` times so
that each sees the same machine, and prints (or writes to --out) one JSON object: the machine
(cores, memory, load average before and after), then per setting the records/s of
confluent-kafka and of kafka-producer-perf-test (median over rounds), their ratio, bytes on
disk per record, records per batch; the batching sweep (records per batch per linger.ms and
batch.size); send-to-ack percentiles per acks (0, 1, all, idempotent, min.insync.replicas=1);
what idempotence writes in the batch headers; per codec the bytes per flight record; transaction
commit times; end-to-end latency percentiles; consumer records/s, MB/s and records per fetch per
max.partition.fetch.bytes for confluent-kafka and kafka-consumer-perf-test; and (unless
--no-serving) the page cache and sendfile counts of a consumer served by the leader.
`--markdown` prints the README's tables instead. Absolute numbers move with the load: compare rows
of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics

import psutil

from kafkalab.experiments import performance as pf
from kafkalab.perf import ProducerSettings

# The Python clients are notebook 10's own programs (``pf.notebook_program``), edited line by line
# as the notebook edits them; only the throughput table's bursts use ``ProducerSettings``.

SETTINGS = {
    "acks=1": ProducerSettings(acks="1"),
    "acks=all": ProducerSettings(acks="all"),
    "acks=all, idempotence": ProducerSettings(acks="all", idempotence=True),
    "acks=all, lz4": ProducerSettings(acks="all", compression="lz4"),
    "acks=1, batch.size=16384": ProducerSettings(acks="1", batch_size=16384),
    "acks=1, linger.ms=0": ProducerSettings(acks="1", linger_ms=0),
}


def machine() -> dict:
    return {"platform": platform.platform(), "cores": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def measure(messages: int, rounds: int, consumer_messages: int = 50_000, serving: bool = True) -> dict:
    out: dict = {"machine_before": machine(), "messages": messages, "record_size": 100, "throughput": {}}
    runs: dict[str, list] = {k: [] for k in SETTINGS}
    for _ in range(rounds):
        for label, s in SETTINGS.items():
            runs[label].append(pf.run_throughput(messages, 100, s))
    for label, rs in runs.items():
        py = statistics.median(r.python_records_per_s for r in rs)
        jv = statistics.median(r.java_records_per_s for r in rs)
        out["throughput"][label] = {"python_records_per_s": round(py), "java_records_per_s": round(jv),
                                    "ratio": round(py / jv, 2), "bytes_on_disk_per_record": rs[-1].bytes_on_disk_per_record,
                                    "python_records_per_batch": rs[-1].records_per_batch,
                                    "java_records_per_batch": rs[-1].java_records_per_batch}
    paced, burst = pf.notebook_program("paced_producer"), pf.notebook_program("burst_producer")
    reader, txn = pf.notebook_program("measuring_consumer"), pf.notebook_program("transactional_producer")
    lingers = {f"linger.ms={ms}": paced.replace('"linger.ms": 200', f'"linger.ms": {ms}', name=f"linger_{ms}")
               for ms in (0, 1, 5, 20, 100)}
    sizes = {f"batch.size={b}": paced.replace('"batch.size": 1000000', f'"batch.size": {b}', name=f"batch_{b}")
             for b in (2000, 16384)}
    out["batching"] = [vars(r) for r in pf.run_batching_programs({**lingers, **sizes}, rate=5000, seconds=2.0)]
    unlingered = pf.unlingered(paced)
    acks_all = unlingered.replace('"acks": "1",', '"acks": "all",', name="acks_all")
    out["acks"] = [vars(r) for r in pf.run_acks_programs({
        "0": (unlingered.replace('"acks": "1",', '"acks": "0",', name="acks_0"), 2), "1": (unlingered, 2),
        "all": (acks_all, 2),
        "all, idempotent": (acks_all.replace('"enable.idempotence": False,', '"enable.idempotence": True,',
                                             name="acks_all_idempotent"), 2),
        "all, min.insync.replicas=1": (acks_all, 1)}, rate=200, seconds=3.0, rounds=rounds)]
    burst_all = burst.replace('"acks": "1"', '"acks": "all"', name="burst_acks_all")
    out["idempotence"] = [vars(r) for r in pf.run_idempotence_cost(
        [burst_all, burst_all.replace('"enable.idempotence": False', '"enable.idempotence": True', name="burst_idempotent")],
        messages=messages // 5)]
    out["compression"] = [vars(r) for r in pf.run_compression(
        {c: burst.replace('"compression.type": "none"', f'"compression.type": "{c}"', name=f"burst_{c}")
         for c in ("none", "gzip", "snappy", "lz4", "zstd")}, records=50_000)]
    out["transactions"] = [vars(r) for r in pf.run_transactions(
        {k: txn.replace("RECORDS_PER_TRANSACTION = 10", f"RECORDS_PER_TRANSACTION = {k}", name=f"transactional_{k}")
         for k in (10, 100, 1000)}, commits=20)]
    out["latency"] = pf.run_latency(unlingered, {
        "defaults (fetch.min.bytes=1)": reader,
        "fetch.min.bytes=100000, fetch.wait.max.ms=500": pf.with_fetch(reader, "held_consumer", fetch_min_bytes=100000)},
        rate=200, seconds=5.0, java_records=1000).to_json()
    fetching = pf.with_fetch(reader, "fetching", fetch_wait_max_ms=pf.PARKED_FETCH_MS)

    def readers(*sizes: int) -> list:
        return [pf.with_fetch(fetching, f"fetch_{n}", max_partition_fetch_bytes=n) for n in sizes]

    out["consumer"] = pf.run_consumer_throughput(readers(1000, pf.DEFAULT_PARTITION_FETCH_BYTES), consumer_messages,
                                                 1000).to_json()
    out["consumer_large_batches"] = pf.run_consumer_throughput(
        readers(100, pf.DEFAULT_PARTITION_FETCH_BYTES), consumer_messages, 100, producer_batch_size=1_000_000).to_json()
    if serving:  # notebook 10 section 6: its TLS reader is the measuring consumer with one line added
        tls_reader = reader.replace('"enable.auto.commit": False,',
                                    '"enable.auto.commit": False,\n    "security.protocol": "SSL",', name="tls_reader")
        out["serving"] = pf.run_serving(burst, reader, tls_reader, records=200_000, record_size=200, trace=True).to_json()
    out["machine_after"] = machine()
    return out


def markdown(result: dict) -> str:
    m = result["machine_before"]
    lines = [f"{result['messages']:,} records of {result['record_size']} bytes, RF 3, on {m['cores']} cores and "
             f"{m['memory_gib']} GiB (load average {m['load_average'][0]} at the start):", "",
             "| settings | confluent-kafka records/s | kafka-producer-perf-test records/s | ratio | bytes on disk / record |",
             "|---|---:|---:|---:|---:|"]
    for label, r in result["throughput"].items():
        lines.append(f"| {label} | {r['python_records_per_s']:,} | {r['java_records_per_s']:,} | {r['ratio']} | "
                     f"{r['bytes_on_disk_per_record']} |")
    for key in ("consumer", "consumer_large_batches"):
        c = result.get(key)
        if not c:
            continue
        lines += ["", f"Reading {c['messages']:,} records of {c['record_size']} bytes written in batches of "
                      f"{c['records_per_batch']} records:", "",
                  "| max.partition.fetch.bytes | client | records/s | MB/s | records / fetch |", "|---:|---|---:|---:|---:|"]
        for row in c["rows"]:
            for b in (row["python"], row["java"]):
                if b:
                    lines.append(f"| {row['max_partition_fetch_bytes']:,} | {b['client']} | {round(b['records_per_s']):,} | "
                                 f"{b['mb_per_s']:.1f} | {b['records_per_fetch']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="write the JSON here instead of printing it")
    ap.add_argument("--consumer-messages", type=int, default=50_000, help="records each consumer reads back")
    ap.add_argument("--no-serving", action="store_true", help="skip the page cache / sendfile run (needs strace)")
    ap.add_argument("--markdown", action="store_true", help="print the README's tables")
    args = ap.parse_args()
    result = measure(args.messages, args.rounds, args.consumer_messages, not args.no_serving)
    text = markdown(result) if args.markdown else json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(result, indent=2))
    print(text)


if __name__ == "__main__":
    main()
