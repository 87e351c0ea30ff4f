import type { Client } from "./client.js";
import type { Message } from "./message.js";
import type { SubscribeOptions } from "./subscription.js";

/** Client.messages' options: SubscribeOptions without the handler; one message at a time. */
export type MessagesOptions = Omit<SubscribeOptions, "handler" | "concurrency">;

/** The loop ended (break, return or throw) while it held the message: it goes back to the broker. */
class LoopEnded extends Error {
  constructor() {
    super("the for await loop ended while holding the message");
    this.name = "LoopEnded";
  }
}

/**
 * Client.messages: a subscription with one handler at a time, whose handler hands each
 * message to the loop and settles when the loop asks for the next (ack) or ends (nack).
 * The subscription closes when the loop ends, or when opts.signal aborts (the loop then
 * ends, after the message it holds).
 */
export async function* messages(client: Client, patterns: readonly string[], opts: MessagesOptions): AsyncGenerator<Message> {
  const held: { m: Message; settle: (err?: Error) => void }[] = [];
  let wake: (() => void) | undefined;
  let over = false;
  const sub = await client.subscribe(patterns, {
    ...opts,
    concurrency: 1,
    handler: (m) =>
      new Promise<void>((resolve, reject) => {
        held.push({ m, settle: (err) => (err === undefined ? resolve() : reject(err)) });
        wake?.();
      }),
  });
  void sub.done.then(() => {
    over = true;
    wake?.();
  });
  let current: (typeof held)[number] | undefined;
  try {
    for (;;) {
      while (held.length === 0) {
        if (over) {
          if (sub.error !== undefined) {
            throw sub.error;
          }
          return;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
      current = held.shift()!;
      yield current.m;
      current.settle();
      current = undefined;
    }
  } finally {
    current?.settle(new LoopEnded());
    for (const h of held) {
      h.settle(new LoopEnded());
    }
    await sub.close();
  }
}
