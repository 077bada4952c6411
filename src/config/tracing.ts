// Where and how herd's spans go (config `tracing`, issue 23), resolved from the config keys and,
// for each empty key, the standard variables of the OpenTelemetry specification
// (opentelemetry.io/docs/specs/otel/protocol/exporter/ and
// opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/). Pure: the caller
// passes the environment. The daemon's SDK adapter and the engine drivers read the same answer.
import type { TracingConfig } from "./types.ts";

export type Env = Readonly<Record<string, string | undefined>>;

/** OTLP/HTTP's default base URL (the specification's http/protobuf and http/json default). */
export const OTLP_HTTP_DEFAULT = "http://localhost:4318";

const set = (v: string | undefined): string | null => (v !== undefined && v.trim() !== "" ? v.trim() : null);

/**
 * The full URL spans are POSTed to: `<endpoint>/v1/traces` for a base URL (the key, or
 * OTEL_EXPORTER_OTLP_ENDPOINT), or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is (the specification
 * uses a signal-specific URL unchanged).
 */
export function otlpTracesUrl(t: TracingConfig, env: Env): string {
  const join = (base: string) => `${base.replace(/\/+$/, "")}/v1/traces`;
  if (t.endpoint !== "") return join(t.endpoint);
  const signal = set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  if (signal) return signal;
  return join(set(env.OTEL_EXPORTER_OTLP_ENDPOINT) ?? OTLP_HTTP_DEFAULT);
}

export type OtlpProtocol = "http/protobuf" | "http/json";

/** The encoding: the key, else the signal's variable, else the general one, else http/protobuf. */
export function otlpProtocol(t: TracingConfig, env: Env): OtlpProtocol | { unsupported: string; from: string } {
  if (t.protocol !== "") return t.protocol;
  for (const name of ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]) {
    const v = set(env[name]);
    if (v === null) continue;
    return v === "http/protobuf" || v === "http/json" ? v : { unsupported: v, from: name };
  }
  return "http/protobuf";
}

/** service.name: the key, else OTEL_SERVICE_NAME, else herd. */
export function serviceName(t: TracingConfig, env: Env): string {
  return t.service_name !== "" ? t.service_name : (set(env.OTEL_SERVICE_NAME) ?? "herd");
}
