// Helpers every driver shares: addresses, the KV-events JSON, the base environment, the LaunchSpec
// shape, flag lookup and the default health / recover rules. Pure.
import { createHash } from "node:crypto";
import type { RecoverCandidate } from "../driver.ts";
import type { DriverInput, KvEventsSpec, LaunchSpec } from "../types.ts";

/** Address herd dials for an engine bound to `host` (a wildcard bind is reached over loopback). */
export function connectHost(host: string): string {
  if (host === "" || host === "0.0.0.0" || host === "*") return "127.0.0.1";
  if (host === "::" || host === "[::]") return "::1";
  return host;
}

export function baseUrl(host: string, port: number): string {
  const h = connectHost(host);
  return `http://${h.includes(":") ? `[${h}]` : h}:${port}`;
}

/** KV event topic naming the worker, after llm-d's `kv@<pod>@<model>` convention. */
export function kvTopic(id: string, model: string): string {
  return `kv@${id}@${model}`;
}

/** The loopback address an engine bound to `host` can keep its side sockets on; null when not loopback. */
export function loopbackBindHost(host: string): string | null {
  if (host === "localhost") return "127.0.0.1";
  if (host === "::1" || host === "[::1]") return "::1";
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ? host : null;
}

/**
 * The engine binds its publisher on `tcp://*:P`: vLLM binds only when the endpoint contains `*`
 * or `::` and otherwise *connects* out (vllm/distributed/kv_events.py ZmqEventPublisher), so a
 * concrete address would not work.
 */
export function kvBindJson(input: DriverInput, withEnableKey: boolean): { json: string; spec: KvEventsSpec } | undefined {
  const { entry, kvPorts } = input;
  const topic = entry.kv_events?.topic || kvTopic(input.id, input.model.name);
  let bindPub: string;
  let bindReplay: string;
  let spec: KvEventsSpec;
  if (entry.kv_events) {
    // Explicit endpoints: the engine gets them verbatim, herd dials them with wildcards resolved.
    bindPub = entry.kv_events.endpoint;
    bindReplay = entry.kv_events.replay_endpoint;
    const dial = (ep: string) => ep.replace(/\/\/(\*|0\.0\.0\.0)(?=:)/, `//${connectHost(input.entry.host)}`);
    spec = { endpoint: dial(bindPub), replayEndpoint: bindReplay ? dial(bindReplay) : "", topic };
  } else if (kvPorts) {
    bindPub = `tcp://*:${kvPorts.pub}`;
    bindReplay = `tcp://*:${kvPorts.replay}`;
    const h = connectHost(entry.host);
    spec = { endpoint: `tcp://${h}:${kvPorts.pub}`, replayEndpoint: `tcp://${h}:${kvPorts.replay}`, topic };
  } else {
    return undefined;
  }
  // Publisher is always explicit because older vLLM and every SGLang default it to "null".
  const cfg: Record<string, unknown> = withEnableKey ? { enable_kv_cache_events: true } : {};
  cfg.publisher = "zmq";
  cfg.endpoint = bindPub;
  if (bindReplay) cfg.replay_endpoint = bindReplay;
  cfg.topic = topic;
  return { json: JSON.stringify(cfg), spec };
}

/** CUDA_VISIBLE_DEVICES, PYTHONHASHSEED (same for every engine: block hashes must agree), entry env. */
export function engineEnv(input: DriverInput): Record<string, string> {
  const env: Record<string, string> = {};
  if (input.gpus.length > 0) env.CUDA_VISIBLE_DEVICES = input.gpus.join(",");
  env.PYTHONHASHSEED = String(input.supervisor.python_hash_seed);
  Object.assign(env, input.entry.env);
  return env;
}

/** The LaunchSpec for argv (entry `args` appended last: argparse and click take the last repeat). */
export function makeSpec(input: DriverInput, argv: string[], servedModelName: string, kvEvents?: KvEventsSpec, env?: Record<string, string>): LaunchSpec {
  const s: LaunchSpec = {
    id: input.id,
    argv: [...argv, ...input.entry.args],
    env: { ...(env ?? {}), ...engineEnv(input) },
    host: input.entry.host,
    port: input.port,
    url: baseUrl(input.entry.host, input.port),
    healthPath: input.entry.health_path,
    servedModelName,
    gpus: input.gpus,
  };
  if (kvEvents) s.kvEvents = kvEvents;
  return s;
}

/** Value of the last `--flag V` or `--flag=V` in argv (the one argparse keeps); undefined if absent. */
export function lastFlag(argv: readonly string[], flag: string): string | undefined {
  for (let i = argv.length - 1; i >= 0; i--) {
    const a = argv[i]!;
    if (a.startsWith(`${flag}=`)) return a.slice(flag.length + 1);
    if (a === flag) return argv[i + 1];
  }
  return undefined;
}

/** A positive integer flag value, else undefined. */
export function positiveIntFlag(argv: readonly string[], flag: string): number | undefined {
  const raw = lastFlag(argv, flag);
  const n = raw === undefined ? NaN : Number(raw);
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

/**
 * Identity of a launch: argv and environment. HERD_SUPERVISOR_PID is left out: it names the herd,
 * not the engine, and changes with every herd start.
 */
export function launchHash(spec: Pick<LaunchSpec, "argv" | "env">): string {
  const env = Object.entries(spec.env).filter(([k]) => k !== "HERD_SUPERVISOR_PID").sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return createHash("sha256").update(JSON.stringify([spec.argv, env])).digest("hex").slice(0, 32);
}

export const httpOk = { healthy: (status: number) => status === 200 };

/** Adopt when the previous engine is this worker on this port with exactly this command line. */
export function sameLaunch(previous: RecoverCandidate, spec: LaunchSpec): boolean {
  return previous.worker === spec.id && previous.port === spec.port && previous.argvHash === launchHash(spec);
}

export const noCapacity = (): undefined => undefined;
