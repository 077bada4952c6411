// The OpenTelemetry SDK behind herd's tracing seam (src/core/trace.ts), at the edge: only this file
// imports @opentelemetry/*, and only when `tracing.enabled` (dynamic imports), so a node with
// tracing off never loads the SDK. Spans go through the SDK's BatchSpanProcessor (a bounded queue:
// OTEL_BSP_MAX_QUEUE_SIZE, default 2048, spans beyond it dropped) to its OTLP/HTTP exporter,
// protobuf or JSON. The sampler, batch timings and export headers follow the standard OTEL_*
// variables the SDK reads itself; URL, protocol and service.name come from src/config/tracing.ts.
import type { Span as ApiSpan, Context } from "@opentelemetry/api";
import type { Sampler } from "@opentelemetry/sdk-trace-base";
import type { Config, TracingConfig } from "../config/types.ts";
import { otlpProtocol, otlpTracesUrl, serviceName, type Env } from "../config/tracing.ts";
import type { Logger } from "../core/log.ts";
import type { Span, SpanAttrs, SpanKind, Tracer } from "../core/trace.ts";
import { VERSION } from "../version.ts";

/** The SDK tracer for this node's config; throws (a startup error) on a protocol herd cannot speak. */
export async function startTracing(config: Config, log: Logger, env: Env = process.env): Promise<Tracer> {
  const t = config.tracing;
  const protocol = otlpProtocol(t, env);
  if (typeof protocol !== "string") throw new Error(`${protocol.from}=${protocol.unsupported}: herd exports OTLP over HTTP only (http/protobuf or http/json)`);
  const url = otlpTracesUrl(t, env);
  const [api, core, sdk, res, sem] = await Promise.all([
    import("@opentelemetry/api"),
    import("@opentelemetry/core"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/semantic-conventions"),
  ]);
  const exporter =
    protocol === "http/json"
      ? new (await import("@opentelemetry/exporter-trace-otlp-http")).OTLPTraceExporter({ url })
      : new (await import("@opentelemetry/exporter-trace-otlp-proto")).OTLPTraceExporter({ url });
  const resource = res
    .defaultResource()
    .merge(res.detectResources({ detectors: [res.envDetector] }))
    .merge(res.resourceFromAttributes({ [sem.ATTR_SERVICE_NAME]: serviceName(t, env), [sem.ATTR_SERVICE_VERSION]: VERSION, "service.instance.id": config.node.name }));
  const sampler = samplerOf(t, env, sdk);
  const provider = new sdk.BasicTracerProvider({ resource, spanProcessors: [new sdk.BatchSpanProcessor(exporter)], ...(sampler ? { sampler } : {}) });
  const tracer = provider.getTracer("herd", VERSION);
  const w3c = new core.W3CTraceContextPropagator();
  const KIND = { server: api.SpanKind.SERVER, client: api.SpanKind.CLIENT, internal: api.SpanKind.INTERNAL } as const;

  const open = (name: string, parent: Context, attrs: SpanAttrs | undefined, kind: SpanKind): Span => {
    const s = tracer.startSpan(name, { kind: KIND[kind], ...(attrs ? { attributes: attrs } : {}) }, parent);
    return wrap(s);
  };
  const wrap = (s: ApiSpan): Span => {
    let ended = false;
    let header: string | null | undefined;
    return {
      get traceparent() {
        if (header === undefined) {
          // The SDK's own propagator: an unsampled span still passes its trace id and flags on.
          const carrier: Record<string, string> = {};
          w3c.inject(api.trace.setSpan(api.ROOT_CONTEXT, s), carrier, api.defaultTextMapSetter);
          header = carrier.traceparent ?? null;
        }
        return header;
      },
      recording: s.isRecording(),
      set: (attrs) => void s.setAttributes(attrs),
      child: (name, attrs, kind = "internal") => open(name, api.trace.setSpan(api.ROOT_CONTEXT, s), attrs, kind),
      end(error) {
        if (ended) return;
        ended = true;
        if (error !== undefined) s.setStatus({ code: api.SpanStatusCode.ERROR, message: error });
        s.end();
      },
    };
  };
  log.info("tracing on", { url, protocol, service: serviceName(t, env), sampler: t.sampler || env.OTEL_TRACES_SAMPLER || "parentbased_always_on" });
  return {
    enabled: true,
    start(name, traceparent, attrs, kind = "server") {
      // A malformed header leaves the context empty: the request starts a new trace.
      const parent = traceparent ? w3c.extract(api.ROOT_CONTEXT, { traceparent }, api.defaultTextMapGetter) : api.ROOT_CONTEXT;
      return open(name, parent, attrs, kind);
    },
    async shutdown() {
      try {
        await provider.shutdown(); // exports what the batch holds
      } catch (e) {
        log.warn("tracing: the last export failed", { err: e instanceof Error ? e.message : String(e) });
      }
    },
  };
}

/** The configured sampler, or undefined to let the SDK read OTEL_TRACES_SAMPLER(_ARG). */
function samplerOf(t: TracingConfig, env: Env, sdk: typeof import("@opentelemetry/sdk-trace-base")): Sampler | undefined {
  if (t.sampler === "") return undefined;
  const fromEnv = Number(env.OTEL_TRACES_SAMPLER_ARG);
  const ratio = t.sampler_arg >= 0 ? t.sampler_arg : Number.isFinite(fromEnv) && fromEnv >= 0 && fromEnv <= 1 && env.OTEL_TRACES_SAMPLER_ARG !== "" ? fromEnv : 1;
  const root = (s: string): Sampler => (s.endsWith("always_off") ? new sdk.AlwaysOffSampler() : s.endsWith("traceidratio") ? new sdk.TraceIdRatioBasedSampler(ratio) : new sdk.AlwaysOnSampler());
  return t.sampler.startsWith("parentbased_") ? new sdk.ParentBasedSampler({ root: root(t.sampler) }) : root(t.sampler);
}
