"""README's Python quickstart publisher: three orders through a pipelined Publisher, each
confirmed by its Future."""

import os

import tinybroker

with tinybroker.Client(os.environ.get("TINYBROKER_ADDR", "127.0.0.1:7878")) as c:
    with c.publisher() as p:
        confirms = [p.publish("orders.created", f'{{"id": {i}}}'.encode()) for i in range(1, 4)]
        for f in confirms:
            f.result()
    print("published 3 orders")
