"""W1 and W2 (shared/bench/WORKLOADS.md) with the Python client as publisher and consumers, in
one process: `python3 w12.py W1|W2 HOST:PORT N`. Prints one JSON line: the figure and the
deliveries seen more than once. bench/clients.sh runs it beside the Go and TypeScript ones."""

import json
import os
import resource
import sys
import threading
import time

import tinybroker


def main() -> None:
    workload, addr, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    payload = os.urandom(256)
    clients = [tinybroker.Client(addr) for _ in range(5)]
    lock = threading.Lock()
    counts = [0] * 4
    seen: set[str] = set()
    dup = 0
    done = threading.Event()
    last = [0.0]
    total = 4 * n if workload == "W1" else n

    def handler_for(i: int) -> tinybroker.Handler:
        def handle(m: tinybroker.Message) -> None:
            nonlocal dup
            with lock:
                counts[i] += 1
                if workload == "W2":
                    if m.system_id in seen or m.attempt > 1:
                        dup += 1
                    seen.add(m.system_id)
                if sum(counts) == total:
                    last[0] = time.monotonic()
                    done.set()
        return handle

    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    subs = []
    for i in range(4):
        if workload == "W1":
            subs.append(clients[i].subscribe("bench.w1", handler=handler_for(i)))
        else:
            subs.append(clients[i].subscribe("bench.w2", handler=handler_for(i), group=f"w2-py-{tag}",
                                             max_in_flight=256))
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    start = time.monotonic()
    with clients[4].publisher() as p:
        for _ in range(n):
            p.publish(f"bench.{workload.lower()}", payload)
    if not done.wait(600):
        sys.exit(f"{workload}: got {sum(counts)} of {total} in 600s")
    for s in subs:
        s.close()
    for c in clients:
        c.close()
    figure = "delivered_msgs_per_s" if workload == "W1" else "acked_msgs_per_s"
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - cpu0
    print(json.dumps({"client": "python", "workload": workload, figure: round(total / (last[0] - start)),
                      "redelivered": dup, "client_cpu_pct": round(100 * cpu / (last[0] - start))}))


if __name__ == "__main__":
    main()
