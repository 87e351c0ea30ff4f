import type { Message as WireMessage } from "./gen/tinybroker/v1/broker_pb.js";
import { AlreadySettledError } from "./errors.js";

/** What a Message tells its subscription when it is acked, nacked or touched. */
export interface Settler {
  readonly balanced: boolean;
  settle(kind: "ack" | "nack" | "touch", systemId: string, gen: number, delayMs: number, reason: string): void;
}

/**
 * A message delivered to a subscription. `attempt` is 1 on the first delivery and grows with
 * each redelivery; `redelivered` is `attempt > 1`.
 */
export class Message {
  /** Identifies the message in this broker process. */
  readonly systemId: string;
  readonly topic: string;
  readonly payload: Buffer;
  readonly headers: Readonly<Record<string, string>>;
  /** When the broker accepted it, in nanoseconds since the Unix epoch. */
  readonly publishedAtNs: bigint;
  readonly attempt: number;
  readonly redelivered: boolean;
  readonly subscriptionId: string;
  /** The ordering and fairness key; "" if none. */
  readonly key: string;
  readonly priority: number;
  private settled = false;

  /** @internal */
  constructor(
    private readonly sub: Settler,
    private readonly gen: number,
    m: WireMessage,
  ) {
    this.systemId = m.systemId;
    this.topic = m.topic;
    this.payload = Buffer.from(m.payload.buffer, m.payload.byteOffset, m.payload.byteLength);
    this.headers = m.headers;
    this.publishedAtNs = m.publishTimeUnixNano;
    this.attempt = m.attempt;
    this.redelivered = m.redelivered;
    this.subscriptionId = m.subscriptionId;
    this.key = m.key;
    this.priority = m.priority;
  }

  /** The payload as UTF-8 text. */
  text(): string {
    return this.payload.toString("utf8");
  }

  /** Whether ack or nack was called. */
  get isSettled(): boolean {
    return this.settled;
  }

  /**
   * Acknowledges the message: the broker forgets it. Sent asynchronously, in batches, on the
   * subscription's stream; a fanout delivery takes no ack. Throws AlreadySettledError after
   * an ack or nack. The handler's return acks for you.
   */
  ack(): void {
    this.settle("ack", 0, "");
  }

  /** Gives the message back to its group, redelivered after delayMs (default at once). A handler's throw nacks for you. */
  nack(delayMs = 0, reason = ""): void {
    this.settle("nack", Math.max(delayMs, 0), reason.slice(0, 256));
  }

  /**
   * Extends the message's ack deadline by a full deadline from now, for work longer than
   * it: call it more often than the deadline (Subscription.ackDeadlineMs).
   */
  touch(): void {
    this.check();
    if (this.sub.balanced) {
      this.sub.settle("touch", this.systemId, this.gen, 0, "");
    }
  }

  private check(): void {
    if (this.settled) {
      throw new AlreadySettledError(`tinybroker: message ${this.systemId} already acked or nacked`);
    }
  }

  private settle(kind: "ack" | "nack", delayMs: number, reason: string): void {
    this.check();
    this.settled = true;
    if (this.sub.balanced) {
      this.sub.settle(kind, this.systemId, this.gen, delayMs, reason);
    }
  }
}
