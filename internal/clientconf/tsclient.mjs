// The TypeScript client's driver for the client conformance harness (internal/clientconf): it
// reads commands as JSON lines on stdin, runs them with sdk/typescript (compiled to its dist/
// by the harness) against the broker named by its argument, and writes answers and deliveries
// as JSON lines on stdout (PROTOCOL.md). TB_CA_FILE (a PEM CA: connect with TLS trusting it)
// and TB_TOKEN (the bearer token) come from the environment.
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { Client } from "../../sdk/typescript/dist/index.js";

// Writes to a pipe are synchronous on Linux: lines of handlers and commands do not interleave.
function write(v) {
  process.stdout.write(JSON.stringify(v) + "\n");
}

async function run(c, subs, cmd) {
  switch (cmd.op) {
    case "publish": {
      // pipelined: every publish in flight at once (the client pipelines them on one stream),
      // then every confirm awaited; otherwise each confirmed before the next.
      const pending = [];
      for (let i = 0; i < Math.max(cmd.count ?? 0, 1); i++) {
        const opts = cmd.msg_id ? { msgId: `${cmd.msg_id}:${i}` } : {};
        const p = c.publish(cmd.topic, `${cmd.payload ?? ""}:${i}`, opts);
        if (cmd.pipelined) {
          pending.push(p);
        } else {
          await p;
        }
      }
      await Promise.all(pending);
      return;
    }
    case "subscribe": {
      const sleepMs = cmd.sleep_ms ?? 0;
      const touchMs = cmd.touch_ms ?? 0;
      const jitterMs = cmd.jitter_ms ?? 0;
      const handler = async (m) => {
        if (jitterMs > 0) {
          await sleep(Math.random() * jitterMs);
        }
        write({ event: "message", sub: cmd.name, topic: m.topic, payload: m.text(), attempt: m.attempt, system_id: m.systemId });
        if (touchMs > 0) {
          const end = Date.now() + sleepMs;
          while (Date.now() < end) {
            await sleep(Math.min(touchMs, end - Date.now()));
            m.touch();
          }
        } else if (sleepMs > 0) {
          await sleep(sleepMs);
        }
        if (cmd.mode === "nack-first" && m.attempt === 1) {
          throw new Error("nack-first: failing the first attempt");
        }
      };
      const opts = { handler, concurrency: cmd.concurrency || 1, nackDelayMs: cmd.nack_delay_ms ?? 0 };
      if (cmd.group) {
        opts.group = cmd.group;
        if (cmd.ack_deadline_ms) {
          opts.ackDeadlineMs = cmd.ack_deadline_ms;
        }
      }
      subs.set(cmd.name, await c.subscribe(cmd.patterns, opts));
      return;
    }
    case "close": {
      const s = subs.get(cmd.name);
      if (s === undefined) {
        throw new Error(`no subscription ${cmd.name}`);
      }
      subs.delete(cmd.name);
      await s.close();
      return;
    }
    default:
      throw new Error(`unknown op ${JSON.stringify(cmd.op)}`);
  }
}

async function main() {
  if (process.argv.length !== 3) {
    process.stderr.write("usage: node tsclient.mjs HOST:PORT (commands as JSON lines on stdin)\n");
    process.exit(2);
  }
  const ca = process.env.TB_CA_FILE;
  const c = new Client(process.argv[2], {
    token: process.env.TB_TOKEN || undefined,
    tls: ca ? { caFile: ca } : undefined,
  });
  const subs = new Map();
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    let cmd;
    try {
      cmd = JSON.parse(line);
      if (cmd.op === "exit") {
        break;
      }
      await run(c, subs, cmd);
    } catch (e) {
      write({ error: `${e.name}: ${e.message}` });
      continue;
    }
    write({ ok: cmd.op });
  }
  await c.close(); // what it could not ack is redelivered
  process.exit(0);
}

await main();
