import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Broker, PublishRequestSchema } from "./gen/tinybroker/v1/broker_pb.js";
import { ClosedError } from "./errors.js";
import { Publisher } from "./publisher.js";
import { Subscription, type SubscribeOptions } from "./subscription.js";
import { messages, type MessagesOptions } from "./iterate.js";
import type { Message } from "./message.js";

/** TLS settings: the broker's CA (a PEM file or its bytes) and the name to check in its certificate. */
export interface TLSOptions {
  /** Path of a PEM file of the CA that signed the broker's certificate; without it (and ca), the system's roots. */
  caFile?: string;
  /** The CA's PEM bytes, instead of caFile. */
  ca?: Buffer;
  /** The name checked in the broker's certificate, when it is not the address's host. */
  serverName?: string;
}

export interface ClientOptions {
  /** "USER:TOKEN", sent with every call as `authorization: Bearer USER:TOKEN`; use it with TLS unless the broker is on this machine. */
  token?: string;
  /** true for TLS with the system's roots, or the CA to trust; unset: plaintext. */
  tls?: boolean | TLSOptions;
  /** A failed publish and a broken subscription wait this long before trying again, [min, max] in ms, doubling. Default [50, 5000]. */
  backoffMs?: [number, number];
  /** The most messages the publish stream has sent and not had confirmed (default 1024); more wait. */
  maxPending?: number;
}

export interface PublishOptions {
  /** The message id that makes a retry safe (default: a random one). The broker publishes a message id once within its dedupe window. */
  msgId?: string;
  /** The ordering and fairness key. */
  key?: string;
  /** The message expires this long after the broker accepted it. */
  ttlMs?: number;
  /** 0 (the default) to 9, higher first, in a group declared with max_priority. */
  priority?: number;
  headers?: Record<string, string>;
  /** Give up waiting for the confirm after this long (default 30 s): the message may still be published. */
  timeoutMs?: number;
}

/** What became of a published message. */
export interface PublishResult {
  /** Identifies the message in this broker process. */
  systemId: string;
  /** How many fanout subscriptions and groups it went to: 0 when none matched, a plugin dropped it or it is delayed. */
  routed: number;
  /** The broker had this message id already (within its dedupe window): nothing was published again; the rest is the first publish's. */
  duplicate: boolean;
}

/** A random message id: 16 bytes in unpadded base64url, as the Go and Python clients'. */
export function newMessageId(): string {
  return randomBytes(16).toString("base64url");
}

const serviceName = Broker.typeName;

/** The full method name gRPC wants, "/tinybroker.v1.Broker/Publish". */
export function methodPath(name: string): string {
  return `/${serviceName}/${name}`;
}

/** gRPC's (de)serializers for a protobuf-es message type. */
export function codec<D extends DescMessage>(schema: D) {
  return {
    serialize: (m: MessageShape<D>): Buffer => Buffer.from(toBinary(schema, m)),
    deserialize: (b: Buffer): MessageShape<D> => fromBinary(schema, b),
  };
}

/** Something the client closes when it closes: a subscription, the publisher. */
interface Closer {
  close(): Promise<void>;
}

/**
 * A connection to a broker, or to the nodes of a cluster.
 *
 * `addrs` is "host:port", a comma-separated list of them, or an array: the client uses the
 * first, and moves to the next when a call finds the current one UNAVAILABLE.
 */
export class Client {
  /** The broker addresses, in the order the client tries them. */
  readonly addrs: readonly string[];
  /** @internal */
  readonly backoffMs: [number, number];
  private readonly creds: grpc.ChannelCredentials;
  private readonly channelOptions: grpc.ChannelOptions;
  private readonly token: string | undefined;
  private readonly conns = new Map<number, grpc.Client>();
  private current = 0;
  private closed = false;
  private readonly closers = new Set<Closer>();
  private readonly publisher: Publisher;

  constructor(addrs: string | readonly string[], opts: ClientOptions = {}) {
    const list = typeof addrs === "string" ? addrs.split(",") : addrs;
    this.addrs = list.map((a) => a.trim()).filter((a) => a !== "");
    if (this.addrs.length === 0) {
      throw new Error("tinybroker: Client needs at least one address (host:port)");
    }
    const [min, max] = opts.backoffMs ?? [50, 5000];
    if (!(min > 0 && min <= max)) {
      throw new Error(`tinybroker: backoffMs [${min}, ${max}]: need 0 < min <= max`);
    }
    this.backoffMs = [min, max];
    this.token = opts.token;
    // gRPC's own reconnection back-off starts at 1 s and grows to 120 s: capped here, a broker
    // back after a restart is found as soon as the publish retries and re-opens look for it.
    this.channelOptions = {
      "grpc.max_receive_message_length": 64 << 20,
      "grpc.initial_reconnect_backoff_ms": min,
      "grpc.min_reconnect_backoff_ms": min,
      "grpc.max_reconnect_backoff_ms": max,
    };
    if (opts.tls) {
      const t: TLSOptions = opts.tls === true ? {} : opts.tls;
      const ca = t.ca ?? (t.caFile !== undefined ? readFileSync(t.caFile) : null);
      this.creds = grpc.credentials.createSsl(ca);
      if (t.serverName) {
        this.channelOptions["grpc.ssl_target_name_override"] = t.serverName;
        this.channelOptions["grpc.default_authority"] = t.serverName;
      }
    } else {
      this.creds = grpc.credentials.createInsecure();
    }
    this.publisher = new Publisher(this, opts.maxPending ?? 1024);
    this.closers.add(this.publisher);
  }

  /**
   * Publishes one message and resolves with the broker's confirm. Publishes are pipelined on
   * one PublishStream: many may be in flight at once, and the broker handles them in order.
   * The message carries a message id (opts.msgId, or a random one): when the stream breaks
   * before the confirm, it is sent again with the same id (4 attempts in all, with back-off,
   * on the next address when the current one is UNAVAILABLE) and the broker publishes it once.
   * Rejects with a BrokerError.
   */
  publish(topic: string, payload: Uint8Array | string, opts: PublishOptions = {}): Promise<PublishResult> {
    if (this.closed) {
      return Promise.reject(new ClosedError("tinybroker: client closed"));
    }
    const req = create(PublishRequestSchema, {
      topic,
      payload: typeof payload === "string" ? Buffer.from(payload) : payload,
      headers: opts.headers ?? {},
      messageId: opts.msgId ?? newMessageId(),
      key: opts.key ?? "",
      priority: Math.max(opts.priority ?? 0, 0),
    });
    if (opts.ttlMs !== undefined) {
      req.ttl = durationFromMs(opts.ttlMs);
    }
    return this.publisher.publish(req, opts.timeoutMs ?? 30_000);
  }

  /**
   * Opens a subscription that runs `opts.handler` on each message, and resolves once the
   * broker confirmed it: a bad pattern or an unreachable broker rejects here (see
   * SubscribeOptions for the rest).
   */
  subscribe(patterns: string | readonly string[], opts: SubscribeOptions): Promise<Subscription> {
    return Subscription.open(this, typeof patterns === "string" ? [patterns] : patterns, opts);
  }

  /**
   * The messages of a subscription as an async iterator: each message is acked when the
   * loop asks for the next one (unless it was acked or nacked already), and nacked when the
   * loop ends early (break, return, throw) while it holds one. See MessagesOptions.
   */
  messages(patterns: string | readonly string[], opts: MessagesOptions = {}): AsyncIterable<Message> {
    return messages(this, typeof patterns === "string" ? [patterns] : patterns, opts);
  }

  /** Closes every subscription, waits for the publishes in flight (up to 5 s), then closes the connections. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) {
      return;
    }
    this.closed = true;
    await Promise.all([...this.closers].map((c) => c.close()));
    for (const c of this.conns.values()) {
      c.close();
    }
  }

  /** @internal The current node's index and its connection (opened on first use). */
  conn(): { i: number; client: grpc.Client } {
    if (this.closed) {
      throw new ClosedError("tinybroker: client closed");
    }
    const i = this.current;
    let c = this.conns.get(i);
    if (c === undefined) {
      c = new grpc.Client(this.addrs[i]!, this.creds, this.channelOptions);
      this.conns.set(i, c);
    }
    return { i, client: c };
  }

  /** @internal Node i did not answer: the next call goes to the next node, unless another caller moved on already. */
  unavailable(i: number): void {
    if (this.current === i) {
      this.current = (i + 1) % this.addrs.length;
    }
  }

  /** @internal The metadata of every call: the bearer token, if any. */
  metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.token) {
      md.set("authorization", "Bearer " + this.token);
    }
    return md;
  }

  /** @internal */
  track(c: Closer): void {
    if (this.closed) {
      throw new ClosedError("tinybroker: client closed");
    }
    this.closers.add(c);
  }

  /** @internal */
  untrack(c: Closer): void {
    this.closers.delete(c);
  }
}
