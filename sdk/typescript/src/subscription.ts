import { status, type ClientDuplexStream, type StatusObject } from "@grpc/grpc-js";
import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, durationMs, type Duration } from "@bufbuild/protobuf/wkt";
import {
  DeliveryMode,
  OpenSubscriptionSchema,
  SubscribeRequestSchema,
  SubscribeResponseSchema,
  type OpenSubscription,
  type SubscribeRequest,
  type SubscribeResponse,
} from "./gen/tinybroker/v1/broker_pb.js";
import { BrokerError, ClosedError, brokerError, codeName, fatalCodes, toStatus } from "./errors.js";
import { Message, type Settler } from "./message.js";
import { codec, methodPath, type Client } from "./client.js";

/** A handler of messages: resolving acks the message, rejecting (or throwing) nacks it. */
export type Handler = (m: Message) => void | Promise<void>;

export interface SubscribeOptions {
  handler: Handler;
  /** The consumer group: with it the subscription is a balanced member; without it, a fanout subscription. */
  group?: string;
  /** The subscription id (default: the group; for fanout, one the broker makes up). */
  id?: string;
  /** Balanced only: how many unacked messages the member may hold (default: concurrency). */
  maxInFlight?: number;
  /** How many handlers run at once (default 1; with 1, messages are handled in the order they came). */
  concurrency?: number;
  /** Balanced only: an unacked message is redelivered after this long (default: the broker's, 30 s). */
  ackDeadlineMs?: number;
  /** A message whose handler rejects is redelivered after this long (default at once). */
  nackDelayMs?: number;
  /** Balanced only: after this many attempts a message goes to the dead-letter topic (0: unlimited). */
  maxDeliveries?: number;
  /** Balanced only: where dead letters go (default "dlq.<subscription id>"). */
  deadLetterTopic?: string;
  /** Closes the subscription when aborted. */
  signal?: AbortSignal;
}

/** Bounds the ids of one AckBatch, NackBatch or TouchBatch frame. */
const maxIdsPerFrame = 4096;
/** Reading pauses while this many messages wait for a handler (fanout: the broker buffers, then drops). */
const highWater = 1024;
/** How long close waits for the broker to end the stream after the last acks. */
const closeWaitMs = 5000;

const subCodec = { req: codec(SubscribeRequestSchema), resp: codec(SubscribeResponseSchema) };

interface Settlement {
  kind: "ack" | "nack" | "touch";
  systemId: string;
  gen: number; // the generation of the stream the message came on
  delayMs: number;
  reason: string;
}

/** The broker refused the subscription (a Refused frame): re-opening would be refused too. */
class RefusedError extends BrokerError {}

/**
 * An open subscription (Client.subscribe): one Subscribe stream, re-opened with back-off
 * when it breaks, whose messages go to up to `concurrency` handlers at once.
 *
 * The acks, nacks and touches of the handlers go out in batches on the stream. When the
 * stream breaks (the broker restarted, the connection was lost) the subscription re-opens
 * it, on the next address if the current one does not answer; an error that re-opening
 * cannot fix ends it, and `error` says which. `done` resolves when it has ended.
 */
export class Subscription implements Settler {
  /** @internal */
  readonly balanced: boolean;
  /** The subscription id in force (the broker's, for a fanout subscription opened without one). */
  subscriptionId = "";
  /** Identifies this stream among the members of its group. */
  memberId = "";
  /** Balanced: the ack deadline in force; touch more often than this. */
  ackDeadlineMs = 0;
  /** Why the subscription ended, if an error it could not recover from ended it. */
  error: BrokerError | undefined;
  /** Resolves when the subscription has ended (close, abort, or an error: see `error`). */
  readonly done: Promise<void>;

  private resolveDone!: () => void;
  private readonly open: OpenSubscription;
  private readonly handler: Handler;
  private readonly concurrency: number;
  private readonly nackDelayMs: number;
  private call: ClientDuplexStream<SubscribeRequest, SubscribeResponse> | undefined;
  private callStatus: Promise<StatusObject> | undefined;
  private gen = 0; // the current stream's generation
  private endedGen = 0; // the last generation whose end was handled
  private ready = false; // the current stream is subscribed
  private paused = false;
  private queue: Message[] = [];
  private running = 0;
  private idle: (() => void) | undefined;
  private settlements: Settlement[] = [];
  private flushScheduled = false;
  private closing = false;
  private finished = false; // close sent the last acks: no more are taken
  private readonly stop = new AbortController();

  private constructor(
    private readonly client: Client,
    patterns: readonly string[],
    opts: SubscribeOptions,
  ) {
    const concurrency = opts.concurrency ?? 1;
    if (!(concurrency >= 1) || (opts.maxInFlight !== undefined && !(opts.maxInFlight >= 1))) {
      throw new Error(`tinybroker: concurrency ${concurrency} and maxInFlight ${opts.maxInFlight} must be at least 1`);
    }
    this.handler = opts.handler;
    this.concurrency = concurrency;
    this.nackDelayMs = opts.nackDelayMs ?? 0;
    this.balanced = opts.group !== undefined && opts.group !== "";
    this.open = create(OpenSubscriptionSchema, {
      subscriptionId: opts.id ?? opts.group ?? "",
      topicPatterns: [...patterns],
      mode: DeliveryMode.FANOUT,
    });
    if (this.balanced) {
      this.open.mode = DeliveryMode.BALANCED;
      this.open.consumerGroup = opts.group!;
      this.open.maxInFlight = opts.maxInFlight ?? concurrency;
      this.open.maxDeliveries = opts.maxDeliveries ?? 0;
      this.open.deadLetterTopic = opts.deadLetterTopic ?? "";
      if (opts.ackDeadlineMs !== undefined) {
        this.open.ackDeadline = durationFromMs(opts.ackDeadlineMs);
      }
    } else if (opts.maxInFlight !== undefined || opts.ackDeadlineMs !== undefined || opts.maxDeliveries || opts.deadLetterTopic) {
      throw new Error(
        "tinybroker: maxInFlight, ackDeadlineMs, maxDeliveries and deadLetterTopic are for balanced subscriptions " +
          "(give a group); fanout deliveries are not acked",
      );
    }
    this.done = new Promise((resolve) => {
      this.resolveDone = resolve;
    });
  }

  /** @internal Client.subscribe: the first open tries each address in turn until one answers. */
  static async open(client: Client, patterns: readonly string[], opts: SubscribeOptions): Promise<Subscription> {
    const s = new Subscription(client, patterns, opts);
    for (let attempt = 1; ; attempt++) {
      try {
        await s.openStream();
        break;
      } catch (err) {
        if (!(err instanceof BrokerError) || err instanceof RefusedError || err.code !== status.UNAVAILABLE || attempt >= client.addrs.length) {
          s.call?.cancel();
          throw err;
        }
      }
    }
    try {
      client.track(s);
    } catch (err) {
      s.call?.cancel();
      throw err;
    }
    if (opts.signal !== undefined) {
      if (opts.signal.aborted) {
        await s.close();
      } else {
        opts.signal.addEventListener("abort", () => void s.close(), { once: true });
      }
    }
    return s;
  }

  private what(): string {
    return `subscribe to ${JSON.stringify(this.open.topicPatterns)}`;
  }

  /** Opens a stream and resolves on `subscribed`; rejects with a BrokerError (RefusedError if the broker refused it). */
  private openStream(): Promise<void> {
    const { i, client } = this.client.conn();
    const gen = ++this.gen;
    this.ready = false;
    this.paused = false;
    const call = client.makeBidiStreamRequest(
      methodPath("Subscribe"),
      subCodec.req.serialize,
      subCodec.resp.deserialize,
      this.client.metadata(),
    );
    this.call = call;
    this.callStatus = new Promise((resolve) => call.on("status", resolve));
    return new Promise((resolve, reject) => {
      let opened = false;
      call.on("data", (r: SubscribeResponse) => {
        const f = r.frame;
        if (!opened) {
          opened = true;
          if (f.case === "subscribed") {
            this.subscriptionId = f.value.subscriptionId;
            this.memberId = f.value.memberId;
            this.ackDeadlineMs = f.value.ackDeadline ? durationMs(f.value.ackDeadline as Duration) : 0;
            if (gen === this.gen) {
              this.ready = true;
              this.scheduleFlush();
            }
            resolve();
          } else if (f.case === "refused") {
            call.cancel();
            reject(new RefusedError(`tinybroker: ${this.what()}: refused: ${f.value.error}`, toStatus(f.value.code)));
          } else {
            call.cancel();
            reject(new BrokerError("tinybroker: protocol error: the broker's first Subscribe frame is not `subscribed`", status.INTERNAL));
          }
          return;
        }
        if (f.case === "messages") {
          for (const m of f.value.messages) {
            this.queue.push(new Message(this, gen, m));
          }
          if (this.queue.length >= highWater && !this.paused && call === this.call) {
            this.paused = true;
            call.pause();
          }
          this.pump();
        } else if (f.case === "ended") {
          this.ended(gen, toStatus(f.value.code), f.value.error);
          call.cancel();
        }
      });
      call.on("error", () => {}); // the status event says why it ended
      call.on("status", (st: StatusObject) => {
        // A stream that ends with OK was ended by the broker: it is re-opened as a lost one.
        const code = st.code === status.OK ? status.UNAVAILABLE : st.code;
        if (code === status.UNAVAILABLE) {
          this.client.unavailable(i);
        }
        if (!opened) {
          opened = true;
          reject(brokerError(this.what(), { code, details: st.details || "the broker ended the stream" }, this.client.addrs));
          return;
        }
        this.ended(gen, code, st.details);
      });
      call.write(create(SubscribeRequestSchema, { frame: { case: "open", value: this.open } }));
    });
  }

  /** The stream of generation gen ended with code: re-open it, or end the subscription if that cannot help. */
  private ended(gen: number, code: status, details: string): void {
    if (gen !== this.gen || gen === this.endedGen || this.closing) {
      return;
    }
    this.endedGen = gen;
    this.ready = false;
    if (fatalCodes.has(code)) {
      this.fail(new BrokerError(`tinybroker: subscription ${JSON.stringify(this.open.topicPatterns)} ended: ${codeName(code)}: ${details}`, code));
      return;
    }
    void this.reconnect();
  }

  private async reconnect(): Promise<void> {
    const [min, max] = this.client.backoffMs;
    let wait = min;
    while (!this.closing) {
      // Jitter: the members of a group do not reconnect in step.
      try {
        await sleep(wait / 2 + (Math.random() * wait) / 2, undefined, { signal: this.stop.signal });
      } catch {
        return; // closed
      }
      wait = Math.min(2 * wait, max);
      try {
        await this.openStream();
        return;
      } catch (err) {
        if (this.closing) {
          return;
        }
        if (err instanceof ClosedError) {
          void this.close();
          return;
        }
        if (err instanceof RefusedError || (err instanceof BrokerError && fatalCodes.has(err.code))) {
          this.fail(err);
          return;
        }
      }
    }
  }

  private fail(err: BrokerError): void {
    this.error = err;
    void this.close();
  }

  /** Starts handlers for waiting messages, up to concurrency at once. */
  private pump(): void {
    while (!this.closing && this.running < this.concurrency && this.queue.length > 0) {
      const m = this.queue.shift()!;
      this.running++;
      void this.run(m);
    }
    if (this.paused && this.queue.length < highWater / 4) {
      this.paused = false;
      this.call?.resume();
    }
  }

  private async run(m: Message): Promise<void> {
    try {
      await this.handler(m);
      if (!m.isSettled) {
        m.ack();
      }
    } catch (err) {
      if (!m.isSettled) {
        try {
          m.nack(this.nackDelayMs, err instanceof Error ? `${err.name}: ${err.message}` : String(err));
        } catch {
          // closed meanwhile: the broker redelivers it
        }
      }
    } finally {
      this.running--;
      if (this.running === 0) {
        this.idle?.();
      }
      this.pump();
    }
  }

  /** @internal Message.ack, nack and touch. */
  settle(kind: Settlement["kind"], systemId: string, gen: number, delayMs: number, reason: string): void {
    if (this.finished) {
      throw new ClosedError("tinybroker: subscription closed");
    }
    this.settlements.push({ kind, systemId, gen, delayMs, reason });
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(() => {
        this.flushScheduled = false;
        this.flush();
      });
    }
  }

  /**
   * Writes the settlements that piled up as frames on the current stream, once it is
   * subscribed. Nacks and touches of messages from an older stream are dropped: the broker
   * gave those back to the group when their stream broke, maybe to another member.
   */
  private flush(): void {
    if (!this.ready || this.call === undefined || this.settlements.length === 0) {
      return;
    }
    const items = this.settlements.filter((x) => x.kind === "ack" || x.gen === this.gen);
    this.settlements = [];
    for (const f of frames(items)) {
      this.call.write(f);
    }
  }

  /**
   * Ends the subscription: messages not started are left to the broker, the running handlers
   * are waited for, their acks and nacks sent, and the stream's send side closed, upon which
   * the broker applies them and leaves the group (its other unacked messages go to the other
   * members). Idempotent. Do not await it in a handler, which it waits for.
   */
  async close(): Promise<void> {
    if (this.closing) {
      return this.done;
    }
    this.closing = true;
    this.stop.abort();
    this.queue = [];
    if (this.running > 0) {
      await new Promise<void>((resolve) => {
        this.idle = resolve;
      });
    }
    this.finished = true;
    const call = this.call;
    if (call !== undefined && this.ready && this.balanced) {
      this.flush();
      call.end();
      const timeout = new AbortController();
      await Promise.race([this.callStatus, sleep(closeWaitMs, undefined, { signal: timeout.signal }).catch(() => {})]);
      timeout.abort();
    }
    call?.cancel();
    this.client.untrack(this);
    this.resolveDone();
  }
}

/** One AckBatch frame, one TouchBatch, and one NackBatch per distinct delay and reason (each split at maxIdsPerFrame ids). */
function* frames(items: Settlement[]): Generator<SubscribeRequest> {
  const chunks = function* (ids: string[]): Generator<string[]> {
    for (let i = 0; i < ids.length; i += maxIdsPerFrame) {
      yield ids.slice(i, i + maxIdsPerFrame);
    }
  };
  const acks = items.filter((x) => x.kind === "ack").map((x) => x.systemId);
  const touches = items.filter((x) => x.kind === "touch").map((x) => x.systemId);
  const nacks = new Map<string, { delayMs: number; reason: string; ids: string[] }>();
  for (const x of items) {
    if (x.kind === "nack") {
      const k = JSON.stringify([x.delayMs, x.reason]);
      const n = nacks.get(k) ?? { delayMs: x.delayMs, reason: x.reason, ids: [] };
      n.ids.push(x.systemId);
      nacks.set(k, n);
    }
  }
  for (const ids of chunks(acks)) {
    yield create(SubscribeRequestSchema, { frame: { case: "ack", value: { systemIds: ids } } });
  }
  for (const ids of chunks(touches)) {
    yield create(SubscribeRequestSchema, { frame: { case: "touch", value: { systemIds: ids } } });
  }
  for (const n of nacks.values()) {
    for (const ids of chunks(n.ids)) {
      yield create(SubscribeRequestSchema, {
        frame: { case: "nack", value: { systemIds: ids, reason: n.reason, delay: n.delayMs > 0 ? durationFromMs(n.delayMs) : undefined } },
      });
    }
  }
}
