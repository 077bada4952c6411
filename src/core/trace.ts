// The tracing seam (issue 23). Request code opens spans through `Tracer` / `Span.child` and never
// sees OpenTelemetry: the SDK adapter lives at the edge (src/daemon/tracing.ts) and is loaded only
// when `tracing.enabled`. Off, every span is NOOP_SPAN: no allocation, no clock read, no header.
//
// Spans are explicit parents (no ambient context): a span's children are opened from it, and a
// remote parent arrives as a W3C `traceparent` header (www.w3.org/TR/trace-context/), which the
// adapter continues instead of starting a new root trace.

export type SpanAttrs = Record<string, string | number | boolean>;

export type SpanKind = "server" | "client" | "internal";

export interface Span {
  /** This span as a W3C traceparent for an outgoing request (engine, peer node); null when not recorded. */
  readonly traceparent: string | null;
  /** Its attributes are kept (sampled): callers skip computing costly attributes otherwise. */
  readonly recording: boolean;
  /** Add attributes (later values for a key win). */
  set(attrs: SpanAttrs): void;
  /** A child span of this one. */
  child(name: string, attrs?: SpanAttrs, kind?: SpanKind): Span;
  /** End the span; `error` marks it failed with that text. Only the first call counts. */
  end(error?: string): void;
}

export interface Tracer {
  readonly enabled: boolean;
  /**
   * A span with no local parent: it continues `traceparent` (an incoming request's header) when
   * that is a valid W3C traceparent, else starts a new trace.
   */
  start(name: string, traceparent: string | null, attrs?: SpanAttrs, kind?: SpanKind): Span;
  /** Export what is buffered and stop (the daemon's last step). */
  shutdown(): Promise<void>;
}

export const NOOP_SPAN: Span = {
  traceparent: null,
  recording: false,
  set() {},
  child: () => NOOP_SPAN,
  end() {},
};

export const NOOP_TRACER: Tracer = {
  enabled: false,
  start: () => NOOP_SPAN,
  shutdown: () => Promise.resolve(),
};
