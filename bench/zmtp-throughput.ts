// Throughput of our ZMTP SUB against libzmq's own SUB, both fed by the same kind of libzmq PUB
// (python3-zmq) on this machine in the same run. The libzmq SUB baseline is driven through bun:ffi
// (zmq_recv into one buffer), so it measures libzmq rather than Python.
// Run: ./node_modules/.bin/bun bench/zmtp-throughput.ts [sizes...]   (default 64 1024 65536)
import { dlopen, FFIType } from "bun:ffi";
import { SubSocket } from "../src/transport/zmtp/index.ts";
import { createLogger } from "../src/core/log.ts";

const PY = "/usr/bin/python3";
const PUB_SCRIPT = new URL("../test/fixtures/zmq/bench_pub.py", import.meta.url).pathname;
const BUDGET_BYTES = 100 * 2 ** 20;

interface Result {
  msgs: number;
  seconds: number;
  /** CPU time of this whole process (all threads: libzmq's I/O thread counts) per message. */
  cpuUsPerMsg: number;
}

function cpuMs(since: NodeJS.CpuUsage): number {
  const u = process.cpuUsage(since);
  return (u.user + u.system) / 1000;
}

type PubKind = "python" | "ffi";
const FFI_PUB = new URL("./zmtp-ffi-pub.ts", import.meta.url).pathname;
let pubKind: PubKind = "python";

async function startPub(size: number, count: number) {
  const argv = pubKind === "python" ? [PY, PUB_SCRIPT] : [process.execPath, FFI_PUB];
  const proc = Bun.spawn([...argv, String(size), String(count)], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  let buf = "";
  const line = async (): Promise<string> => {
    for (;;) {
      const nl = buf.indexOf("\n");
      if (nl >= 0) {
        const l = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        return l;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error("publisher exited");
      buf += new TextDecoder().decode(value);
    }
  };
  const endpoint = await line();
  return {
    endpoint,
    go: () => {
      proc.stdin.write("go\n");
      proc.stdin.flush();
    },
    finish: async () => {
      proc.stdin.write("quit\n");
      proc.stdin.flush();
      proc.kill();
      await proc.exited;
    },
    line,
  };
}

/** Our SUB consuming with `for await`, the way KV event ingestion does. */
async function ours(size: number, count: number, mode: "iterator" | "callback"): Promise<Result> {
  const pub = await startPub(size, count);
  const sub = new SubSocket({ log: createLogger("bench", { level: "warn" }), maxMessageBytes: 2 * size + 1024 });
  let n = 0;
  let t0 = 0;
  let bytes = 0;
  const done = Promise.withResolvers<void>();
  if (mode === "callback") {
    sub.onMessage = (f) => {
      if (n++ === 0) t0 = performance.now();
      bytes += f[0]!.length;
      if (n === count) done.resolve();
    };
  }
  sub.subscribe("T");
  sub.connect(pub.endpoint);
  await sub.whenReady(5000);
  await Bun.sleep(100); // let the SUBSCRIBE reach the publisher
  const c0 = process.cpuUsage();
  pub.go();
  if (mode === "iterator") {
    for await (const f of sub) {
      if (n++ === 0) t0 = performance.now();
      bytes += f[0]!.length;
      if (n === count) break;
    }
  } else {
    await done.promise;
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpuUsPerMsg = (cpuMs(c0) * 1000) / n;
  if (bytes !== count * size) throw new Error(`byte count mismatch ${bytes}`);
  sub.close();
  await pub.finish();
  return { msgs: n, seconds, cpuUsPerMsg };
}

function libzmqSub(size: number, count: number): Promise<Result> {
  const { symbols: z } = dlopen("libzmq.so.5", {
    zmq_ctx_new: { args: [], returns: FFIType.ptr },
    zmq_socket: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.ptr },
    zmq_setsockopt: { args: [FFIType.ptr, FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
    zmq_connect: { args: [FFIType.ptr, FFIType.cstring], returns: FFIType.i32 },
    zmq_recv: { args: [FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i32 },
    zmq_close: { args: [FFIType.ptr], returns: FFIType.i32 },
    zmq_ctx_term: { args: [FFIType.ptr], returns: FFIType.i32 },
  });
  const ZMQ_SUB = 2;
  const ZMQ_SUBSCRIBE = 6;
  const ZMQ_RCVTIMEO = 27;
  return (async () => {
    const pub = await startPub(size, count);
    const ctx = z.zmq_ctx_new();
    const s = z.zmq_socket(ctx, ZMQ_SUB);
    const topic = new TextEncoder().encode("T");
    z.zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic, topic.length);
    const timeo = new Int32Array([3000]);
    z.zmq_setsockopt(s, ZMQ_RCVTIMEO, timeo, 4);
    z.zmq_connect(s, Buffer.from(pub.endpoint + "\0"));
    await Bun.sleep(300); // connect + SUBSCRIBE happen on libzmq's I/O thread
    const c0 = process.cpuUsage();
    pub.go();
    const buf = new Uint8Array(size + 16);
    let n = 0;
    let t0 = 0;
    let bytes = 0;
    while (n < count) {
      const r = z.zmq_recv(s, buf, buf.length, 0);
      if (r < 0) throw new Error(`libzmq recv timed out after ${n} messages`);
      if (n++ === 0) t0 = performance.now();
      bytes += r;
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpuUsPerMsg = (cpuMs(c0) * 1000) / n;
    if (bytes !== count * size) throw new Error(`byte count mismatch ${bytes}`);
    z.zmq_close(s);
    z.zmq_ctx_term(ctx);
    await pub.finish();
    return { msgs: n, seconds, cpuUsPerMsg };
  })();
}

const fmt = (r: Result, size: number) => {
  const mps = r.msgs / r.seconds;
  return `${(mps / 1000).toFixed(0).padStart(6)} k msg/s ${((mps * size) / 2 ** 20).toFixed(1).padStart(8)} MiB/s  cpu ${r.cpuUsPerMsg.toFixed(2).padStart(6)} us/msg`;
};

const sizes = process.argv.slice(2).map(Number);
console.log("ZMTP SUB throughput: libzmq 4.3.4 PUB (SNDHWM 0) -> SUB on loopback, single-frame messages, best of 2");
for (const kind of ["python", "ffi"] as const) {
pubKind = kind;
console.log(kind === "python" ? "publisher: python3-zmq send loop" : "publisher: libzmq via bun:ffi in its own process (faster than the python loop)");
for (const size of sizes.length ? sizes : [64, 1024, 65536]) {
  const count = Math.min(500_000, Math.floor(BUDGET_BYTES / size));
  // Best of two runs each, alternating, to damp noise on a shared 2-core machine.
  const best = (a: Result, b: Result) => (a.msgs / a.seconds >= b.msgs / b.seconds ? a : b);
  let base = await libzmqSub(size, count);
  let it = await ours(size, count, "iterator");
  let cb = await ours(size, count, "callback");
  base = best(base, await libzmqSub(size, count));
  it = best(it, await ours(size, count, "iterator"));
  cb = best(cb, await ours(size, count, "callback"));
  // Wall-clock rate ratio, and CPU-cost ratio (libzmq cpu/msg over ours), which is steadier when
  // other work shares the cores.
  const ratio = (r: Result) => `${(r.msgs / r.seconds / (base.msgs / base.seconds)).toFixed(2)}  cpu-efficiency ${(base.cpuUsPerMsg / r.cpuUsPerMsg).toFixed(2)}`;
  console.log(`${String(size).padStart(6)} B x ${count}`);
  console.log(`  libzmq SUB (ffi)        ${fmt(base, size)}`);
  console.log(`  herd SUB (for await)    ${fmt(it, size)}   ratio ${ratio(it)}`);
  console.log(`  herd SUB (onMessage)    ${fmt(cb, size)}   ratio ${ratio(cb)}`);
}
}
