"""The seed's scenario with the Python client (sdk/python): three workers, A, B and C, are
members of the consumer group "image-resizer" and share fifty thumbnail jobs published to
"jobs.thumb.1" ... "jobs.thumb.50". Each job must be resized exactly once. As main.go.

    make run                                                   # the broker
    PYTHONPATH=sdk/python python3 examples/image-resizer/resizer.py [HOST:PORT]
"""

import os
import sys
import threading

import tinybroker

JOBS = 50
GROUP = "image-resizer"
SUBSCRIPTION_ID = "image-resizer-group"
RUN_HEADER = "image-resizer-run"  # tells this run's jobs from those an earlier run left


def main(addr: str, timeout: float = 60.0) -> int:
    run_id = os.urandom(8).hex()
    lock = threading.Lock()
    resized_by: dict[str, list[str]] = {}
    per_worker: dict[str, int] = {}
    all_done = threading.Event()

    def worker(name: str) -> tinybroker.Handler:
        def resize(m: tinybroker.Message) -> None:
            with lock:
                if m.headers.get(RUN_HEADER) != run_id:
                    print(f"worker {name} dropped {m.topic}, left over from an earlier run", flush=True)
                    return  # acked, so that it does not come back
                # The "resize": a real worker would fetch m.payload's image and write a thumbnail.
                resized_by.setdefault(m.topic, []).append(name)
                per_worker[name] = per_worker.get(name, 0) + 1
                print(f"worker {name} resized {m.topic}", flush=True)
                if len(resized_by) == JOBS and len(resized_by[m.topic]) == 1:
                    all_done.set()
        return resize  # returning acks the job

    with tinybroker.Client(addr) as c:
        subs = [c.subscribe("jobs.thumb.*", handler=worker(w), group=GROUP, id=SUBSCRIPTION_ID) for w in "ABC"]
        with c.publisher() as p:
            for f in [p.publish(f"jobs.thumb.{i}", f"image-{i}.jpg".encode(), headers={RUN_HEADER: run_id})
                      for i in range(1, JOBS + 1)]:
                f.result()  # the broker has the job
        all_done.wait(timeout)
        for s in subs:  # the workers stop and their last acks go out
            s.close()

    problems = []
    for i in range(1, JOBS + 1):
        by = resized_by.get(f"jobs.thumb.{i}", [])
        if not by:
            problems.append(f"jobs.thumb.{i} was never resized")
        elif len(by) > 1:
            problems.append(f"jobs.thumb.{i} was resized {len(by)} times (by {', '.join(by)})")
    if problems:
        print(f"image-resizer: {len(problems)} of {JOBS} jobs went wrong: {'; '.join(problems)}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{w} {per_worker[w]}" for w in sorted(per_worker))
    print(f"all {JOBS} jobs resized exactly once ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7878"))
