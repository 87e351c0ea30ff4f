"""The Python client for tinybroker: publish, and subscribe with a handler run on a bounded
pool of threads that acks what it handled, nacks what failed and re-opens broken streams.

    import tinybroker

    with tinybroker.Client("127.0.0.1:7878") as c:
        c.publish("jobs.thumb.1", b"cat.jpg", headers={"size": "128"})
        sub = c.subscribe("jobs.thumb.*", handler=resize, group="thumbnailers", concurrency=4)
        ...
"""

from tinybroker._client import Client, PublishResult
from tinybroker._common import BrokerError, ClosedError, new_message_id
from tinybroker._publisher import Publisher
from tinybroker._subscription import AlreadySettledError, Handler, Message, Subscription

__all__ = [
    "AlreadySettledError", "BrokerError", "Client", "ClosedError", "Handler", "Message", "PublishResult",
    "Publisher", "Subscription", "new_message_id",
]
