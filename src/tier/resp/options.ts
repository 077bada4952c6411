// The RESP server's options and counters (server.ts has what each bound does).
import type { Clock } from "../../core/clock.ts";
import type { TierStore } from "../store.ts";
import type { RespLimits } from "./parser.ts";
import type { RemoteTierSource } from "./remote.ts";

export interface RespServerOptions {
  host: string;
  port: number;
  store: TierStore;
  password?: string;
  limits?: Partial<RespLimits>;
  maxClients?: number;
  outputSoftBytes?: number;
  outputHardBytes?: number;
  /** Output queued across all connections before none executes commands (default 256 MiB). */
  outputTotalBytes?: number;
  /** Input held for one connection (default: the parser's command bound + 1 MiB). */
  inputMaxBytes?: number;
  keyBytesMax?: number;
  /** Commands one connection runs before the event loop gets a turn (default SLICE_COMMANDS). */
  sliceCommands?: number;
  authDelayMs?: number;
  authDelayMaxMs?: number;
  /** 0 = never. */
  idleTimeoutMs?: number;
  /** An unauthenticated connection must AUTH within this; 0 = never. */
  authTimeoutMs?: number;
  clock?: Clock;
  /** Where a local miss is looked up (other nodes' tiers); it stores what it finds into `store` itself. */
  remote?: RemoteTierSource;
  /** Remote lookups in flight across all clients (default REMOTE_LOOKUPS_MAX); over it a miss is a miss. */
  remoteMax?: number;
  /** Read a large bulk's bytes straight from the socket into its buffer (libc recv via bun:ffi, direct-recv.ts; default on where available, as kv_tier.resp.direct_recv). */
  directRecv?: boolean;
}

export interface RespStats {
  connections: number;
  clients: number;
  commands: number;
  protocol_errors: number;
  http_closed: number;
  output_overflow_closed: number;
  rejected_clients: number;
  /** Failed AUTH attempts (each delays the connection's next command). */
  auth_failures: number;
  /** Connections closed by idleTimeoutMs or authTimeoutMs. */
  timeout_closed: number;
  /** Times a connection stopped reading because it could not execute (backpressure to the client). */
  input_paused: number;
  /** Most output ever queued for one client (bounded by the soft limit plus one reply). */
  output_peak_bytes: number;
  /** Most output ever queued across all clients (bounded by outputTotalBytes plus one reply). */
  output_total_peak_bytes: number;
  /** Local misses looked up remotely (counted when asked), found, not found, and refused over `remoteMax`. */
  remote_lookups: number;
  remote_hits: number;
  remote_misses: number;
  remote_rejected: number;
  /** Bytes read from sockets straight into open bulks (kv_tier.resp.direct_recv). */
  direct_recv_bytes: number;
}

export function newRespStats(): RespStats {
  return {
    connections: 0,
    clients: 0,
    commands: 0,
    protocol_errors: 0,
    http_closed: 0,
    output_overflow_closed: 0,
    rejected_clients: 0,
    auth_failures: 0,
    timeout_closed: 0,
    input_paused: 0,
    output_peak_bytes: 0,
    output_total_peak_bytes: 0,
    remote_lookups: 0,
    remote_hits: 0,
    remote_misses: 0,
    remote_rejected: 0,
    direct_recv_bytes: 0,
  };
}
