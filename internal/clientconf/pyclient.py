"""The Python client's driver for the client conformance harness (internal/clientconf): it reads
commands as JSON lines on stdin, runs them with sdk/python's tinybroker against the broker named
by its argument, and writes answers and deliveries as JSON lines on stdout (PROTOCOL.md)."""

import json
import os
import random
import sys
import threading
import time

import grpc

import tinybroker

_out_lock = threading.Lock()


def write(v: dict) -> None:
    # The handler threads and the main thread share stdout.
    with _out_lock:
        sys.stdout.write(json.dumps(v) + "\n")
        sys.stdout.flush()


def run(c: tinybroker.Client, subs: dict, cmd: dict) -> None:
    op = cmd.get("op")
    if op == "publish":
        msg_id = cmd.get("msg_id")
        n = max(cmd.get("count", 0), 1)
        if cmd.get("pipelined"):
            with c.publisher() as p:
                futs = [p.publish(cmd["topic"], f"{cmd.get('payload', '')}:{i}".encode(),
                                  message_id=f"{msg_id}:{i}" if msg_id else None) for i in range(n)]
                for f in futs:
                    f.result(timeout=30)
            return
        for i in range(n):
            c.publish(cmd["topic"], f"{cmd.get('payload', '')}:{i}".encode(),
                      message_id=f"{msg_id}:{i}" if msg_id else None)
    elif op == "subscribe":
        name, mode, sleep = cmd["name"], cmd.get("mode", "ack"), cmd.get("sleep_ms", 0) / 1000
        touch = cmd.get("touch_ms", 0) / 1000

        jitter = cmd.get("jitter_ms", 0) / 1000

        def handler(m: tinybroker.Message) -> None:
            if jitter:
                time.sleep(random.uniform(0, jitter))
            write({"event": "message", "sub": name, "topic": m.topic, "payload": m.payload.decode(),
                   "attempt": m.attempt, "system_id": m.system_id})
            if touch:
                end = time.monotonic() + sleep
                while time.monotonic() < end:
                    time.sleep(min(touch, end - time.monotonic()))
                    m.touch()
            else:
                time.sleep(sleep)
            if mode == "nack-first" and m.attempt == 1:
                raise RuntimeError("nack-first: failing the first attempt")

        group = cmd.get("group") or None
        opts = {}
        if group and cmd.get("ack_deadline_ms"):
            opts["ack_deadline"] = cmd["ack_deadline_ms"] / 1000
        subs[name] = c.subscribe(cmd["patterns"], handler=handler, group=group,
                                 concurrency=cmd.get("concurrency") or 1,
                                 nack_delay=cmd.get("nack_delay_ms", 0) / 1000, **opts)
    elif op == "close":
        subs.pop(cmd["name"]).close()
    else:
        raise ValueError(f"unknown op {op!r}")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: pyclient.py HOST:PORT (commands as JSON lines on stdin)")
    subs: dict = {}
    # PROTOCOL.md: TB_CA_FILE, connect with TLS trusting that CA; TB_TOKEN, the bearer token.
    tls = None
    if os.environ.get("TB_CA_FILE"):
        with open(os.environ["TB_CA_FILE"], "rb") as f:
            tls = grpc.ssl_channel_credentials(root_certificates=f.read())
    with tinybroker.Client(sys.argv[1], token=os.environ.get("TB_TOKEN") or None, tls=tls) as c:
        for line in sys.stdin:
            try:
                cmd = json.loads(line)
                if cmd.get("op") == "exit":
                    break
                run(c, subs, cmd)
            except Exception as e:  # noqa: BLE001  (every failure is the harness's answer)
                write({"error": f"{type(e).__name__}: {e}"})
                continue
            write({"ok": cmd["op"]})


if __name__ == "__main__":
    main()
