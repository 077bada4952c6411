// The admin API client behind `herd status|drain|undrain|logs`. Where herd is, first match wins:
//  1. `--url`;
//  2. `--config FILE`: the runtime file of a live herd in that config's node.data_dir (the address it
//     really listens on, `herd run --listen` included), else the file's frontend.listen;
//  3. the runtime file of a live herd in the default data dir (src/config/host.ts), or in
//     /var/lib/herd (the installed service's) — several live ones is an error naming them;
//  4. http://127.0.0.1:8000 (the embedded default's listen).
// A wildcard listen is reached over loopback. The admin token comes from `--token` or HERD_ADMIN_TOKEN and is only needed
// from another host (loopback callers are trusted; src/admin/routes.ts).
import { errorMessage } from "../core/errors.ts";
import type { Role } from "../config/types.ts";
import type { WorkerState } from "../workers/worker.ts";
import { loadConfigFile } from "../config/load.ts";
import { hostDefaults } from "../config/host.ts";
import { describeRuntime, liveRuntime, type RuntimeInfo } from "./runtime.ts";
import { connectHost } from "../engine/drivers/common.ts";
import type { KvStreamView } from "../kv/consumer.ts";

export const DEFAULT_ADMIN_URL = "http://127.0.0.1:8000";
/** A local admin call answers in milliseconds; this only bounds a wedged or unroutable peer. */
const DEFAULT_TIMEOUT_MS = 5_000;

/** A failure the command reports as one line and exit 1 (unreachable herd, refused call). */
export class OpsError extends Error {
  override name = "OpsError";
}

export interface Target {
  url: string;
  token: string | null;
  /** Where the url came from, for messages: "--url", "--config FILE", "runtime file PATH" or "default". */
  source: string;
}

/** The JSON of GET /admin/cluster (src/admin/routes.ts). */
export interface ClusterView {
  node: string;
  policy: string;
  draining?: boolean;
  in_flight?: number;
  /** Cluster membership and leadership (src/cluster/node.ts); absent from herds before it. */
  discovery?: string;
  leader?: string | null;
  term?: number;
  /** This node leads now (a live grant), and its view may be out of date (cannot reach etcd / a quorum). */
  is_leader?: boolean;
  view_stale?: boolean;
  nodes?: NodeView[];
  workers: WorkerView[];
}

export interface NodeView {
  name: string;
  address: string;
  state: string;
  last_seen_ms: number;
}

export interface WorkerView {
  id: string;
  node: string;
  model: string;
  role: Role;
  kind: string;
  url: string;
  state: WorkerState;
  load: { in_flight: number; running: number | null; waiting: number | null; kv_usage: number | null; scraped_at_ms: number | null };
  restarts: number;
  pid: number | null;
  /** Why the engine last crashed (last error line of its output); absent from herds before it. */
  last_error?: string | null;
  kv_events: KvStreamView | null;
  /** An operator drained it (herd drain); absent from herds before the status page. */
  drained?: boolean;
}

/** "HOST:PORT" (frontend.listen) → the URL a local client dials. */
export function listenToUrl(listen: string): string {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(listen) ?? /^([^:]+):(\d+)$/.exec(listen);
  if (!m) throw new OpsError(`cannot make a URL from listen address ${JSON.stringify(listen)}`);
  if (m[2] === "0") throw new OpsError(`frontend.listen ${listen} uses port 0 (any free port); pass --url with the port herd logged`);
  const host = connectHost(m[1]!);
  return `http://${host.includes(":") ? `[${host}]` : host}:${m[2]}`;
}

function normaliseUrl(raw: string): string {
  const withScheme = /^https?:\/\//i.test(raw) ? raw : `http://${raw}`;
  let u: URL;
  try {
    u = new URL(withScheme);
  } catch {
    throw new OpsError(`--url: not a URL: ${JSON.stringify(raw)}`);
  }
  return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, "")}`;
}

/** Data dirs where a herd started without --config may have left its runtime file. */
export function defaultDataDirs(): string[] {
  return [...new Set([hostDefaults().dataDir, "/var/lib/herd"])];
}

/** The listen address with the port the listener really got (port 0 resolved), dialled like a config's. */
function fromRuntime(info: RuntimeInfo, token: string | null): Target {
  const port = info.url ? /:(\d+)$/.exec(info.url)?.[1] : undefined;
  const listen = port ? info.listen.replace(/:\d+$/, `:${port}`) : info.listen;
  const url = listenToUrl(listen);
  // frontend.tls: the listener speaks https only (the certificate is checked against the system's CAs).
  return { url: info.url?.startsWith("https://") ? url.replace(/^http:/, "https:") : url, token, source: `runtime file of pid ${info.pid} in ${info.data_dir}` };
}

export async function resolveTarget(
  values: Readonly<Record<string, string>>,
  env: Readonly<Record<string, string | undefined>> = process.env,
  dataDirs: () => readonly string[] = defaultDataDirs,
): Promise<Target> {
  const token = values.token ?? (env.HERD_ADMIN_TOKEN || null);
  if (values.url !== undefined) return { url: normaliseUrl(values.url), token, source: "--url" };
  const file = values.config;
  if (file !== undefined) {
    const result = await loadConfigFile(file);
    if (!result.config) {
      const n = result.findings.filter((f) => f.severity === "error").length;
      throw new OpsError(`cannot read frontend.listen from ${file} (${n} config error${n === 1 ? "" : "s"}; see \`herd config check ${file}\`); pass --url`);
    }
    const live = liveRuntime(result.config.node.data_dir);
    if (live) return fromRuntime(live, token);
    const url = listenToUrl(result.config.frontend.listen);
    return { url: result.config.frontend.tls.cert !== "" ? url.replace(/^http:/, "https:") : url, token, source: `--config ${file}` };
  }
  const live = dataDirs().map(liveRuntime).filter((r): r is RuntimeInfo => r !== null);
  if (live.length > 1)
    throw new OpsError(`several herds are running; pass --url or --config to pick one:\n${live.map((r) => `  ${describeRuntime(r)} (data dir ${r.data_dir})`).join("\n")}`);
  if (live[0]) return fromRuntime(live[0], token);
  return { url: DEFAULT_ADMIN_URL, token, source: "default" };
}

export class AdminClient {
  constructor(
    readonly target: Target,
    private readonly timeoutMs = DEFAULT_TIMEOUT_MS,
  ) {}

  cluster(): Promise<ClusterView> {
    return this.call<ClusterView>("GET", "/admin/cluster");
  }

  /** GET /admin/planner (src/planner/status.ts): the planner's pools, reasons and held requests. */
  planner<T>(): Promise<T> {
    return this.call<T>("GET", "/admin/planner");
  }

  /** GET /admin/requests (src/request/record.ts): the decision records from sequence number `since`. */
  requests<R>(since: number): Promise<{ seq: number; now_ms?: number; records: R[] }> {
    return this.call("GET", `/admin/requests?since=${since}`);
  }

  logs(worker: string, lines: number): Promise<{ worker: string; lines: string[] }> {
    return this.call("GET", `/admin/workers/${workerPath(worker)}/logs?lines=${lines}`);
  }

  setDrained(worker: string, drained: boolean): Promise<{ worker: string; state: WorkerState | null }> {
    return this.call("POST", `/admin/workers/${workerPath(worker)}/${drained ? "drain" : "undrain"}`);
  }

  private async call<T>(method: string, path: string): Promise<T> {
    const headers: Record<string, string> = {};
    if (this.target.token) headers.authorization = `Bearer ${this.target.token}`;
    let res: Response;
    try {
      res = await fetch(this.target.url + path, { method, headers, signal: AbortSignal.timeout(this.timeoutMs), redirect: "error" });
    } catch (e) {
      const why = fetchFailure(e, this.timeoutMs);
      const hint = this.target.source === "default" ? " (no runtime file of a running herd found; pass --url or --config if it listens elsewhere)" : "";
      throw new OpsError(`herd is not reachable at ${this.target.url} (from ${this.target.source}): ${why}. Is herd running?${hint}`);
    }
    const text = await res.text();
    let body: unknown = null;
    try {
      body = JSON.parse(text);
    } catch {
      // Not JSON: reported below with the status.
    }
    if (!res.ok) {
      const err = (body as { error?: { message?: string; code?: string } } | null)?.error;
      const detail = err?.message ? `${err.message}${err.code ? ` (${err.code})` : ""}` : text.slice(0, 200);
      const hint = res.status === 401 || res.status === 403 ? hintForAuth(this.target) : "";
      throw new OpsError(`herd at ${this.target.url} answered ${res.status}: ${detail}${hint}`);
    }
    if (body === null) throw new OpsError(`herd at ${this.target.url} answered ${res.status} with a body that is not JSON`);
    return body as T;
  }
}

function fetchFailure(e: unknown, timeoutMs: number): string {
  if (e instanceof Error && e.name === "TimeoutError") return `no answer within ${timeoutMs} ms`;
  const code = (e as { code?: unknown } | null)?.code;
  if (code === "ECONNREFUSED") return "connection refused";
  if (code === "ENOTFOUND") return "unknown host";
  return errorMessage(e);
}

function hintForAuth(t: Target): string {
  return t.token ? "" : " — from another host, pass --token or set HERD_ADMIN_TOKEN (frontend.admin_token)";
}

/** Worker ids contain '/', which the admin routes accept as-is; everything else is escaped. */
function workerPath(id: string): string {
  return id.split("/").map(encodeURIComponent).join("/");
}
