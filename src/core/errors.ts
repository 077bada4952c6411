// Typed errors. Anything that can reach a client is an HerdError with an OpenAI-style type/code and an
// HTTP status; the frontend renders it as {"error": {...}}. Broken invariants use `invariant`, which
// throws an InternalError that is logged loudly and answered with 500 — never a process exit.

export type OpenAIErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  | "server_error"
  | "service_unavailable";

export class HerdError extends Error {
  constructor(
    readonly status: number,
    readonly type: OpenAIErrorType,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "HerdError";
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = "invalid_value") =>
  new HerdError(400, "invalid_request_error", message, code, param);

export const unavailable = (message: string, code = "no_worker_available", retryAfterS = 1) =>
  new HerdError(503, "service_unavailable", message, code, null, { "retry-after": String(retryAfterS) });

export class InternalError extends HerdError {
  constructor(message: string) {
    super(500, "server_error", message, "internal_error");
    this.name = "InternalError";
  }
}

/** Fail loudly on a broken invariant without killing the daemon: callers' error paths catch it. */
export function invariant(cond: unknown, message: string): asserts cond {
  if (!cond) throw new InternalError(`invariant violated: ${message}`);
}

export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
