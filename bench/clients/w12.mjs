// W1 and W2 (shared/bench/WORKLOADS.md) with the TypeScript client (sdk/typescript, built into
// its dist/) as publisher and consumers, in one Node.js process: `node w12.mjs W1|W2 HOST:PORT N`.
// Prints one JSON line, as w12.py and goclient do; bench/clients.sh runs the three.
import { randomBytes } from "node:crypto";
import { Client } from "../../sdk/typescript/dist/index.js";

const [workload, addr, nArg] = process.argv.slice(2);
const n = Number(nArg);
const total = workload === "W1" ? 4 * n : n;
const payload = randomBytes(256);
const clients = Array.from({ length: 5 }, () => new Client(addr));
let got = 0;
let dup = 0;
const seen = new Set();
let finish;
const done = new Promise((resolve) => (finish = resolve));
const handler = async (m) => {
  got++;
  if (workload === "W2") {
    if (seen.has(m.systemId) || m.attempt > 1) dup++;
    seen.add(m.systemId);
  }
  if (got === total) finish(performance.now());
};
const group = `w2-ts-${process.pid}-${Date.now()}`;
const subs = [];
for (let i = 0; i < 4; i++) {
  subs.push(
    await clients[i].subscribe(
      workload === "W1" ? "bench.w1" : "bench.w2",
      workload === "W1" ? { handler } : { handler, group, maxInFlight: 256 },
    ),
  );
}
const cpu0 = process.cpuUsage();
const start = performance.now();
const topic = workload === "W1" ? "bench.w1" : "bench.w2";
// The client pipelines: publishes made in one tick go as one frame; at most maxPending wait
// for their confirms at once, so keep that many in flight.
const inflight = new Set();
for (let i = 0; i < n; i++) {
  const p = clients[4].publish(topic, payload);
  inflight.add(p);
  p.finally(() => inflight.delete(p));
  if (inflight.size >= 1024) await Promise.race(inflight);
}
await Promise.all(inflight);
const last = await done;
const cpu = process.cpuUsage(cpu0);
const secs = (last - start) / 1000;
for (const s of subs) await s.close();
for (const c of clients) await c.close();
const figure = workload === "W1" ? "delivered_msgs_per_s" : "acked_msgs_per_s";
console.log(JSON.stringify({ client: "typescript", workload, [figure]: Math.round(total / secs), redelivered: dup,
  client_cpu_pct: Math.round((100 * (cpu.user + cpu.system) / 1e6) / secs) }));
