// Reading a request body under a byte limit. Content-Length is checked first (cheap refusal of an
// honest client), and the limit is enforced again while reading (src/core/read-limited.ts), because
// a chunked or lying client can send more than it declares.
import { HerdError, badRequest } from "../core/errors.ts";
import { readTextLimited } from "../core/read-limited.ts";

export const tooLarge = (limitBytes: number) =>
  new HerdError(413, "invalid_request_error", `request body exceeds the limit of ${limitBytes} bytes`, "request_too_large");

export async function readBodyLimited(req: Request, limitBytes: number): Promise<string> {
  const declared = req.headers.get("content-length");
  if (declared !== null) {
    const n = Number(declared);
    if (!Number.isFinite(n) || n < 0) throw badRequest("invalid Content-Length header", null, "invalid_header");
    if (n > limitBytes) throw tooLarge(limitBytes);
  }
  return readTextLimited(req.body, limitBytes, () => tooLarge(limitBytes));
}

/**
 * The body's bytes as received (chunks, not joined: joining and decoding 10 MiB is for whoever needs
 * the text, json-guard.ts does it off the event loop). Same limits and errors as readBodyLimited.
 */
export async function readBodyChunks(req: Request, limitBytes: number, reserve: (bytes: number) => void = () => {}): Promise<{ chunks: Uint8Array[]; bytes: number }> {
  const declared = req.headers.get("content-length");
  if (declared !== null) {
    const n = Number(declared);
    if (!Number.isFinite(n) || n < 0) throw badRequest("invalid Content-Length header", null, "invalid_header");
    if (n > limitBytes) throw tooLarge(limitBytes);
    // A declared length frames the body (the server reads exactly that many bytes), so it can be
    // reserved and read in one native call: no ReadableStream, reader or promise per chunk (most
    // of a small request's body cost, bench/frontend-overhead.ts).
    if (!req.bodyUsed) {
      reserve(n);
      const whole = await req.bytes();
      if (whole.byteLength > limitBytes) throw tooLarge(limitBytes);
      if (whole.byteLength > n) reserve(whole.byteLength - n);
      return { chunks: whole.byteLength > 0 ? [whole] : [], bytes: whole.byteLength };
    }
  }
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  if (!req.body) return { chunks, bytes };
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > limitBytes) {
      void reader.cancel().catch(() => {});
      throw tooLarge(limitBytes);
    }
    try {
      reserve(value.byteLength);
    } catch (e) {
      void reader.cancel().catch(() => {});
      throw e;
    }
    chunks.push(value);
  }
  return { chunks, bytes };
}

/** JSON.parse with a 400 that says where the syntax broke. */
export function parseJson(text: string): unknown {
  if (text.trim() === "") throw badRequest("request body is empty; expected a JSON object", null, "invalid_json");
  try {
    return JSON.parse(text);
  } catch (e) {
    throw badRequest(`malformed JSON body: ${e instanceof Error ? e.message : String(e)}`, null, "invalid_json");
  }
}
