"""README's Python quickstart consumer: a member of the consumer group "billing" that handles
orders.* messages; returning acks a message, raising nacks it."""

import os
import signal
import threading

import tinybroker


def handle(m: tinybroker.Message) -> None:
    print(f"{m.topic}: {m.payload.decode()}", flush=True)


with tinybroker.Client(os.environ.get("TINYBROKER_ADDR", "127.0.0.1:7878")) as c:
    c.subscribe("orders.*", handler=handle, group="billing")
    print("consuming orders.* in group billing", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
