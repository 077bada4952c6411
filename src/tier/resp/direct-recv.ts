// Reading a socket straight into a buffer of herd's (kv_tier.resp.direct_recv, issue 25).
// Bun.listen hands `data` a fresh copy of what uSockets read into its own 512 KiB receive buffer,
// and the parser then copies it into the SET's shared-memory slot: three copies of a 1 MiB value
// (kernel → uSockets → JS → slot) where redis-server makes one (kernel → the string it stores,
// redis 7 networking.c readQueryFromClient reads a big bulk's remaining length into it). While a
// large bulk is open and nothing is buffered ahead of it (RespReader.bulkGap), the server calls
// libc recv(fd, gap, MSG_DONTWAIT) on the connection's descriptor (Bun's Socket.fd) through
// bun:ffi: one copy, kernel → slot. Reading behind uSockets' back is safe for plain TCP: it keeps
// no byte count, and its epoll registration is level-triggered, so what is left unread (EAGAIN
// here, then more arrives) or an EOF/error (returned here as ≤ 0 and left alone) is seen by its
// own next read as before.
// Safety: the target is always a Uint8Array passed as the pointer argument (bun:ffi passes its data
// pointer and the array stays referenced for the call), with its own length as the count: no
// pointer arithmetic, no raw address kept between calls (a raw `ptr()` of a buffer the JS side no
// longer references is freed under it: a bare receiver written that way crashed Bun).
import type { Socket } from "bun";
import type { Library } from "bun:ffi";

/** MSG_DONTWAIT on Linux (include/linux/socket.h). */
const MSG_DONTWAIT = 0x40;

export interface DirectRecv {
  /** Bytes read into the start of `into` (> 0), or ≤ 0: nothing now (EAGAIN), EOF or an error. */
  recv(fd: number, into: Uint8Array): number;
}

type Libc = Library<{ recv: { args: ["i32", "ptr", "u64", "i32"]; returns: "i64" } }>;

let cached: DirectRecv | string | undefined;

/** libc's recv via bun:ffi, or the reason it is not available (not Linux, no libc.so.6, no FFI). */
export function directRecv(): DirectRecv | string {
  if (cached !== undefined) return cached;
  if (process.platform !== "linux") return (cached = `direct receive needs Linux (this is ${process.platform})`);
  try {
    const { dlopen } = require("bun:ffi") as typeof import("bun:ffi");
    const libc: Libc = dlopen("libc.so.6", { recv: { args: ["i32", "ptr", "u64", "i32"], returns: "i64" } });
    const recv = libc.symbols.recv;
    cached = {
      recv(fd: number, into: Uint8Array): number {
        if (!Number.isInteger(fd) || fd < 0 || into.length === 0) return 0;
        return Number(recv(fd, into, into.length, MSG_DONTWAIT));
      },
    };
  } catch (e) {
    cached = `direct receive unavailable: ${(e as Error).message}`;
  }
  return cached;
}

/** Whether a RESP server reads large bulks directly (`recv` set) or not, and why not (`off`). */
export interface DirectRecvChoice {
  recv: DirectRecv | undefined;
  /** Why direct receive is off (undefined: on). */
  off: string | undefined;
}

/**
 * kv_tier.resp.direct_recv (default true since issue 25's fifth pass: on wherever it is supported):
 * off when asked off or when the receiver is not available here (not Linux, no libc.so.6, no
 * bun:ffi; `available` is directRecv, a parameter for the tests). TLS needs no decision here: a TLS
 * socket has no plainFd(), so its bytes always take Bun's own reads (checked per read).
 */
export function chooseDirectRecv(asked: boolean, available: () => DirectRecv | string = directRecv): DirectRecvChoice {
  if (!asked) return { recv: undefined, off: "kv_tier.resp.direct_recv is false" };
  const d = available();
  return typeof d === "string" ? { recv: undefined, off: d } : { recv: d, off: undefined };
}

/** The line the tier logs at start: which read path large SET values take, and why. */
export function directRecvLine(off: string | undefined): string {
  return off === undefined
    ? "kv_tier.resp: large SET values are read straight into shared memory (direct_recv: libc recv via bun:ffi; TLS connections excepted)"
    : `kv_tier.resp: direct receive off (${off}); large SET values go through Bun's socket reads`;
}

/**
 * The descriptor of a plain TCP socket of Bun's, or undefined: a TLS socket (its bytes on the wire are
 * ciphertext that OpenSSL inside uSockets must read; getTLSVersion() is non-null once data flows), a
 * closed one (fd -1), or a Bun without the `fd` getter (bun 1.4 has it; its types do not declare it).
 */
export function plainFd(s: Socket<unknown>): number | undefined {
  const x = s as unknown as { fd?: unknown; getTLSVersion?: () => string | null };
  if (typeof x.getTLSVersion !== "function" || x.getTLSVersion() !== null) return undefined;
  const fd = x.fd;
  return typeof fd === "number" && Number.isInteger(fd) && fd >= 0 ? fd : undefined;
}
