// A fast libzmq PUB for bench/zmtp-throughput.ts: libzmq 4.3.4 driven through bun:ffi in its own
// process, because a Python send loop (~100-150k msg/s here) caps the rate below what either SUB
// can take. Same stdin/stdout protocol as test/fixtures/zmq/bench_pub.py.
// usage: bun bench/zmtp-ffi-pub.ts SIZE COUNT
import { dlopen, FFIType } from "bun:ffi";

const { symbols: z } = dlopen("libzmq.so.5", {
  zmq_ctx_new: { args: [], returns: FFIType.ptr },
  zmq_socket: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.ptr },
  zmq_setsockopt: { args: [FFIType.ptr, FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
  zmq_getsockopt: { args: [FFIType.ptr, FFIType.i32, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  zmq_bind: { args: [FFIType.ptr, FFIType.cstring], returns: FFIType.i32 },
  zmq_send: { args: [FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i32 },
  zmq_close: { args: [FFIType.ptr], returns: FFIType.i32 },
});
const ZMQ_PUB = 1;
const ZMQ_SNDHWM = 23;
const ZMQ_LINGER = 17;
const ZMQ_LAST_ENDPOINT = 32;

const size = Number(process.argv[2]);
const count = Number(process.argv[3]);
const ctx = z.zmq_ctx_new();
const s = z.zmq_socket(ctx, ZMQ_PUB);
z.zmq_setsockopt(s, ZMQ_SNDHWM, new Int32Array([0]), 4);
z.zmq_setsockopt(s, ZMQ_LINGER, new Int32Array([0]), 4);
if (z.zmq_bind(s, Buffer.from("tcp://127.0.0.1:0\0")) !== 0) throw new Error("bind failed");
const epBuf = new Uint8Array(256);
const epLen = new BigUint64Array([256n]);
z.zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, epBuf, epLen);
console.log(new TextDecoder().decode(epBuf.subarray(0, Number(epLen[0]) - 1)));

const lines = console[Symbol.asyncIterator]();
await lines.next();
const msg = new Uint8Array(size);
msg[0] = 0x54; // "T"
const t0 = performance.now();
for (let i = 0; i < count; i++) z.zmq_send(s, msg, size, 0);
console.log(`sent ${((performance.now() - t0) / 1000).toFixed(3)}`);
await lines.next();
z.zmq_close(s);
process.exit(0);
