// Who may read /metrics (config `frontend.metrics`, issue 10 item 6). The herd metrics name
// workers, models, request rates and error counts: useful to an attacker mapping a deployment, so
// a node listening beyond loopback can keep them to loopback scrapers (`loopback`) or to holders of
// the admin token (`token`); `open` serves everyone, as before, and start-up says so.
// Loopback clients are always allowed: on a loopback listener every mode is the same.
import { HerdError } from "../core/errors.ts";
import { type KeySet, isLoopback } from "./auth.ts";

export type MetricsMode = "open" | "token" | "loopback";

/** Null when the client may read /metrics, else the error to answer (401/403, OpenAI-shaped). */
export function metricsDenied(mode: MetricsMode, ip: string | null, authorization: string | null | undefined, adminToken: KeySet): HerdError | null {
  if (mode === "open" || isLoopback(ip)) return null;
  if (mode === "loopback") return new HerdError(403, "permission_error", "/metrics is served to loopback clients only (frontend.metrics: loopback)", "metrics_loopback_only");
  if (adminToken.accepts(authorization)) return null;
  return new HerdError(401, "authentication_error", "/metrics needs the admin token (Authorization: Bearer <frontend.admin_token>)", "invalid_admin_token");
}

/** The start-up line for a listener (null on loopback, where /metrics is local either way). */
export function metricsExposureLine(mode: MetricsMode, listen: string, adminTokenSet: boolean): { level: "warn" | "info"; message: string } | null {
  const host = (/^\[([^\]]+)\]:\d+$/.exec(listen) ?? /^([^:]+):\d+$/.exec(listen))?.[1] ?? listen;
  if (host === "localhost" || isLoopback(host)) return null;
  if (mode === "open")
    return { level: "warn", message: `/metrics on ${listen} is open to anyone who can reach it (frontend.metrics: open); set frontend.metrics to token or loopback to restrict it` };
  if (mode === "token" && !adminTokenSet)
    return { level: "warn", message: `/metrics on ${listen} needs the admin token (frontend.metrics: token), but frontend.admin_token is empty: only loopback clients can read it` };
  return { level: "info", message: `/metrics on ${listen} is served to ${mode === "token" ? "admin-token holders and loopback clients" : "loopback clients only"} (frontend.metrics: ${mode})` };
}
