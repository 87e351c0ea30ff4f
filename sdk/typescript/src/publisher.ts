import { status, type ClientDuplexStream, type StatusObject } from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  PublishStreamRequestSchema,
  PublishStreamResponseSchema,
  type PublishRequest,
  type PublishStreamRequest,
  type PublishStreamResponse,
} from "./gen/tinybroker/v1/broker_pb.js";
import { BrokerError, ClosedError, brokerError, codeName, fatalCodes } from "./errors.js";
import { codec, methodPath, type Client, type PublishResult } from "./client.js";

/** How many times a message whose confirm was lost is sent, as the Go and Python clients. */
const publishAttempts = 4;
/** Bounds one PublishStream frame: its messages, and their payloads' bytes (a larger single message goes alone). */
const maxFrameMessages = 1000;
const maxFrameBytes = 1 << 20;
/** How long close waits for the publishes in flight. */
const closeWaitMs = 5000;

const streamCodec = { req: codec(PublishStreamRequestSchema), resp: codec(PublishStreamResponseSchema) };

/** One publish: its request, and the promise waiting for its confirm. */
interface Entry {
  req: PublishRequest;
  attempts: number; // times sent
  done: boolean; // confirmed, failed or timed out
  resolve: (r: PublishResult) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Publisher pipelines the client's publishes on one PublishStream: the publishes of one tick
 * go out as one frame, up to maxPending messages wait for their confirms at once, and when
 * the stream breaks the unconfirmed ones are sent again, with their message ids, on a new
 * stream (the next node's if the broker was UNAVAILABLE).
 */
export class Publisher {
  private stream: ClientDuplexStream<PublishStreamRequest, PublishStreamResponse> | undefined;
  private seq = 0n;
  /** The frames sent on the current stream and not answered yet, in the order sent. */
  private readonly sent = new Map<bigint, Entry[]>();
  private sentCount = 0;
  /** Publishes not sent yet: new ones, and ones to send again. */
  private waiting: Entry[] = [];
  private flushScheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private backoff: number;
  private closed = false;
  private drained: (() => void) | undefined;

  constructor(
    private readonly client: Client,
    private readonly maxPending: number,
  ) {
    if (!(maxPending >= 1)) {
      throw new Error(`tinybroker: maxPending ${maxPending}: need at least 1`);
    }
    this.backoff = client.backoffMs[0];
  }

  publish(req: PublishRequest, timeoutMs: number): Promise<PublishResult> {
    if (this.closed) {
      return Promise.reject(new ClosedError("tinybroker: client closed"));
    }
    return new Promise((resolve, reject) => {
      const e: Entry = { req, attempts: 0, done: false, resolve, reject, timer: undefined };
      e.timer = setTimeout(() => {
        this.fail(e, new BrokerError(
          `tinybroker: publish to "${req.topic}": no confirm in ${timeoutMs} ms (it may have been published; ` +
            `publishing it again with the same msgId is safe)`,
          status.DEADLINE_EXCEEDED,
        ));
      }, timeoutMs);
      this.waiting.push(e);
      this.schedule();
    });
  }

  private schedule(): void {
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(() => {
        this.flushScheduled = false;
        this.flush();
      });
    }
  }

  /** Sends what waits, in frames, while fewer than maxPending messages wait for confirms. */
  private flush(): void {
    this.waiting = this.waiting.filter((e) => !e.done);
    if (this.waiting.length === 0 || this.retryTimer !== undefined) {
      return;
    }
    if (this.stream === undefined && !this.openStream()) {
      return;
    }
    const stream = this.stream!;
    while (this.waiting.length > 0 && this.sentCount < this.maxPending) {
      const room = Math.min(maxFrameMessages, this.maxPending - this.sentCount);
      let n = 0;
      let bytes = 0;
      while (n < room && n < this.waiting.length && (n === 0 || bytes + this.waiting[n]!.req.payload.length <= maxFrameBytes)) {
        bytes += this.waiting[n]!.req.payload.length;
        n++;
      }
      const batch = this.waiting.splice(0, n);
      this.seq++;
      this.sent.set(this.seq, batch);
      this.sentCount += batch.length;
      for (const e of batch) {
        e.attempts++;
      }
      stream.write(create(PublishStreamRequestSchema, { sequence: this.seq, messages: batch.map((e) => e.req) }));
    }
  }

  /** Opens the stream on the current node; false (and every waiting publish failed) once the client is closed. */
  private openStream(): boolean {
    let conn;
    try {
      conn = this.client.conn();
    } catch (err) {
      for (const e of this.waiting) {
        this.fail(e, err as Error);
      }
      this.waiting = [];
      return false;
    }
    const { i, client } = conn;
    const s = client.makeBidiStreamRequest(
      methodPath("PublishStream"),
      streamCodec.req.serialize,
      streamCodec.resp.deserialize,
      this.client.metadata(),
    );
    this.stream = s;
    s.on("data", (r: PublishStreamResponse) => this.answer(r));
    s.on("error", () => {}); // the status event says why it ended
    s.on("status", (st: StatusObject) => this.broken(s, i, st));
    return true;
  }

  /** Settles the publishes of the frame r answers. */
  private answer(r: PublishStreamResponse): void {
    const batch = this.sent.get(r.sequence);
    if (batch === undefined) {
      return;
    }
    this.sent.delete(r.sequence);
    this.sentCount -= batch.length;
    this.backoff = this.client.backoffMs[0]; // the stream works
    const again: Entry[] = [];
    batch.forEach((e, i) => {
      const res = r.results[i];
      if (res === undefined) {
        this.fail(e, new BrokerError(`tinybroker: protocol error: frame ${r.sequence} has ${r.results.length} results for ${batch.length} messages`, status.INTERNAL));
      } else if (res.code === status.OK) {
        this.settle(e, { systemId: res.systemId, routed: res.routed, duplicate: res.duplicate });
      } else if (res.code === status.UNAVAILABLE && e.attempts < publishAttempts) {
        again.push(e); // the broker is shutting down: another node, or the same one back, takes it
      } else {
        this.fail(e, new BrokerError(`tinybroker: publish to "${e.req.topic}": ${codeName(res.code)}: ${res.error}`, res.code));
      }
    });
    this.waiting = again.concat(this.waiting);
    this.flush();
  }

  /** The stream s ended: its unconfirmed publishes are sent again after a back-off, or fail. */
  private broken(s: ClientDuplexStream<PublishStreamRequest, PublishStreamResponse>, node: number, st: StatusObject): void {
    if (s !== this.stream) {
      return;
    }
    this.stream = undefined;
    const unanswered = [...this.sent.values()].flat();
    this.sent.clear();
    this.sentCount = 0;
    // A stream that ended with OK while frames were unanswered lost their confirms all the same.
    const code = st.code === status.OK ? status.UNAVAILABLE : st.code;
    if (code === status.UNAVAILABLE) {
      this.client.unavailable(node);
    }
    const again: Entry[] = [];
    for (const e of unanswered) {
      if (e.done) {
        continue;
      }
      if (this.closed || fatalCodes.has(code) || e.attempts >= publishAttempts) {
        this.fail(e, brokerError(`publish to "${e.req.topic}"`, { code, details: st.details }, this.client.addrs));
      } else {
        again.push(e);
      }
    }
    this.waiting = again.concat(this.waiting.filter((e) => !e.done));
    if (this.waiting.length > 0 && !this.closed) {
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        this.flush();
      }, this.backoff);
      this.backoff = Math.min(2 * this.backoff, this.client.backoffMs[1]);
    }
  }

  private settle(e: Entry, r: PublishResult): void {
    if (!e.done) {
      e.done = true;
      clearTimeout(e.timer);
      e.resolve(r);
      this.checkDrained();
    }
  }

  private fail(e: Entry, err: Error): void {
    if (!e.done) {
      e.done = true;
      clearTimeout(e.timer);
      e.reject(err);
      this.checkDrained();
    }
  }

  private inFlight(): number {
    return this.sentCount + this.waiting.filter((e) => !e.done).length;
  }

  private checkDrained(): void {
    if (this.drained !== undefined && this.inFlight() === 0) {
      this.drained();
    }
  }

  /** Waits for the publishes in flight (up to closeWaitMs), fails the rest with ClosedError and ends the stream. */
  async close(): Promise<void> {
    if (this.closed) {
      return;
    }
    this.closed = true;
    if (this.inFlight() > 0) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.drained = resolve;
        timer = setTimeout(resolve, closeWaitMs);
      });
      clearTimeout(timer);
    }
    clearTimeout(this.retryTimer);
    const left = [...this.sent.values()].flat().concat(this.waiting);
    for (const e of left) {
      this.fail(e, new ClosedError("tinybroker: client closed before the broker confirmed the publish"));
    }
    const s = this.stream;
    this.stream = undefined;
    s?.end();
    s?.cancel();
  }
}
