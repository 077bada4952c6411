// The command subset: AUTH, PING, GET, SET, EXISTS, DEL, SELECT 0, QUIT. That covers LMCache's
// native `resp://` client (csrc/storage_backends/redis/connector.cpp: AUTH [user] pw, GET, SET,
// EXISTS, DEL with byte-exact expectations: "+OK\r\n", ":0\r\n"/":1\r\n", "$<size>\r\n…\r\n" or
// "$-1\r\n") and its redis-py `redis://` connector (SET/GET/EXISTS/DEL; redis-py ignores the error to
// its CLIENT SETINFO). Everything else is "-ERR unknown command", worded as Redis 7 words it.
// Checks run in Redis' order: command exists, arity, then authentication.

// Keys are bounded (`keyBytesMax`, issue 22 row 9: a 100 MiB key grew the catalog by GBs); the parser
// refuses an oversized key as it arrives (argBytesMax), an inline command's here.

import type { PutSlot, TierStore } from "../store.ts";
import { type ArgBytesMax, latin1 } from "./parser.ts";

export interface Session {
  authed: boolean;
  /** Failed AUTH attempts on this connection (the server delays the next command after each). */
  authFailures: number;
  /** The tier slot the parser wrote this SET's value into (server.ts), committed by SET. */
  slot?: PutSlot | undefined;
}

export interface CommandContext {
  store: TierStore;
  /** undefined = no password: every client is authenticated (loopback default). */
  password: string | undefined;
  /** Longest key accepted, bytes. */
  keyBytesMax: number;
}

/** Default key bound: LMCache's keys (`fmt@model@world@worker@hash`, plus a redis:// suffix) are < 300 bytes. */
export const KEY_BYTES_MAX = 1024;
/** Arguments that are neither keys nor values (PING's message, SET options, AUTH, an unknown command's). */
const SMALL_ARG_BYTES = 64 * 1024;
const UNKNOWN_ARG_BYTES = 1024;

/** Per-position argument bounds for the parser: keys ≤ keyBytesMax, a SET value ≤ maxBulk, an unknown
 * command's arguments ≤ 1 KiB (its error quotes 128 bytes of them). */
export function argBytesMax(keyBytesMax: number, maxBulkBytes: number): ArgBytesMax {
  return (name, i) => {
    if (i === 0 || !name) return SMALL_ARG_BYTES;
    switch (name.length <= 6 ? latin1(name).toLowerCase() : "") {
      case "get":
      case "exists":
      case "del":
        return keyBytesMax;
      case "set":
        return i === 1 ? keyBytesMax : i === 2 ? maxBulkBytes : SMALL_ARG_BYTES;
      case "auth":
      case "ping":
      case "select":
      case "quit":
        return SMALL_ARG_BYTES;
      default:
        return UNKNOWN_ARG_BYTES;
    }
  };
}

export type Reply = { chunks: Uint8Array[]; close?: boolean };

const enc = new TextEncoder();
const simple = (s: string): Reply => ({ chunks: [enc.encode(s)] });
export const OK = simple("+OK\r\n");
const ZERO = simple(":0\r\n");
const ONE = simple(":1\r\n");
const NIL = simple("$-1\r\n");
const PONG = simple("+PONG\r\n");
export const err = (msg: string, close = false): Reply => ({ chunks: [enc.encode(`-${msg}\r\n`)], ...(close ? { close } : {}) });
export const int = (n: number): Reply => (n === 0 ? ZERO : n === 1 ? ONE : simple(`:${n}\r\n`));
const CRLF = enc.encode("\r\n");
export const bulk = (b: Uint8Array): Reply => ({ chunks: [enc.encode(`$${b.length}\r\n`), b, CRLF] });

/** GET's reply: one chunk when the bytes around the value already are `$<len>\r\n` before and CRLF
 * after it — a CPU-tier value, framed so in its extent at put time (shm-medium.ts) — so the server
 * writes one contiguous view of shared memory (no copy joining three parts; output.ts); else bulk().
 * The bytes are checked, not assumed: whatever passes the check is exactly the reply. */
export function bulkOf(v: Uint8Array): Reply {
  const n = v.length;
  let digits = 1;
  for (let x = n; x >= 10; x = Math.floor(x / 10)) digits++;
  const head = digits + 3;
  const start = v.byteOffset - head;
  const end = v.byteOffset + n + 2;
  if (n < FRAMED_MIN_BYTES || start < 0 || end > v.buffer.byteLength) return bulk(v);
  const all = new Uint8Array(v.buffer, start, end - start);
  let ok = all[0] === 0x24 && all[head - 2] === 13 && all[head - 1] === 10 && all[head + n] === 13 && all[head + n + 1] === 10;
  for (let i = digits, x = n; ok && i >= 1; i--, x = Math.floor(x / 10)) ok = all[i] === 0x30 + (x % 10);
  return ok ? { chunks: [all] } : bulk(v);
}
/** Below this a value's reply is gathered with the other small replies anyway (output.ts). */
const FRAMED_MIN_BYTES = 16 * 1024;

/** Redis arity: n > 0 exact, n < 0 at least -n (the command name counts). */
const ARITY: Record<string, number> = { auth: -2, ping: -1, get: 2, set: -3, exists: -2, del: -2, select: 2, quit: -1 };
const NO_AUTH_NEEDED = new Set(["auth", "quit"]);

/** Redis closes without replying on these (securityWarningCommand: an HTTP request sent to Redis). */
export const HTTP_COMMANDS = new Set(["post", "host:"]);

export function execute(args: Uint8Array[], s: Session, ctx: CommandContext): Reply {
  const name = latin1(args[0]!).toLowerCase();
  const arity = ARITY[name];
  if (arity === undefined) return unknown(args);
  if ((arity > 0 && args.length !== arity) || (arity < 0 && args.length < -arity)) {
    return err(`ERR wrong number of arguments for '${name}' command`);
  }
  if (!s.authed && !NO_AUTH_NEEDED.has(name)) return err("NOAUTH Authentication required.");
  const key = () => latin1(args[1]!);
  if (name !== "auth" && name !== "ping" && name !== "select" && args.slice(1).some((a, i) => a.length > ctx.keyBytesMax && !(name === "set" && i > 0))) {
    return err(`ERR key longer than ${ctx.keyBytesMax} bytes (kv_tier.resp.key_max_bytes)`);
  }
  switch (name) {
    case "auth":
      return auth(args, s, ctx);
    case "ping":
      if (args.length > 2) return err("ERR wrong number of arguments for 'ping' command");
      return args.length === 2 ? bulk(args[1]!) : PONG;
    case "get": {
      const v = ctx.store.get(key());
      return v ? bulkOf(v) : NIL;
    }
    case "set":
      if (args.length !== 3) return err("ERR syntax error");
      if (s.slot && s.slot.bytes === args[2]) {
        const slot = s.slot;
        s.slot = undefined;
        return slot.commit() ? OK : err("ERR value does not fit the KV tier");
      }
      return ctx.store.put(key(), args[2]!) ? OK : err("ERR value does not fit the KV tier");
    case "exists":
      return int(args.slice(1).filter((k) => ctx.store.has(latin1(k))).length);
    case "del":
      return int(args.slice(1).filter((k) => ctx.store.delete(latin1(k))).length);
    case "select":
      return latin1(args[1]!) === "0" ? OK : err("ERR DB index is out of range");
    case "quit":
      return { ...OK, close: true };
  }
  return unknown(args);
}

function auth(args: Uint8Array[], s: Session, ctx: CommandContext): Reply {
  if (args.length > 3) return err("ERR syntax error");
  if (ctx.password === undefined) {
    return err(
      args.length === 2
        ? "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
        : "WRONGPASS invalid username-password pair or user is disabled.",
    );
  }
  const user = args.length === 3 ? latin1(args[1]!) : "default";
  const given = args[args.length - 1]!;
  if (user === "default" && equalBytes(given, enc.encode(ctx.password))) {
    s.authed = true;
    return OK;
  }
  s.authFailures++;
  return err("WRONGPASS invalid username-password pair or user is disabled.");
}

/** Constant-time for equal lengths (the length itself is not secret enough to matter here). */
function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}

/** Redis 7 (server.c processCommand): "unknown command '<name>', with args beginning with: 'a' 'b' ",
 * the name cut to 128 bytes and the argument list stopping once it reaches 128 characters. */
function unknown(args: Uint8Array[]): Reply {
  let rest = "";
  for (let i = 1; i < args.length && rest.length < 128; i++) rest += `'${latin1(args[i]!.subarray(0, 128 - rest.length))}' `;
  return err(sanitize(`ERR unknown command '${latin1(args[0]!.subarray(0, 128))}', with args beginning with: ${rest}`));
}

/** An error line must stay one line (Redis replaces CR/LF in error strings with spaces). */
function sanitize(s: string): string {
  return s.replace(/[\r\n]/g, " ");
}
