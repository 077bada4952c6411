// Reading a request body under a byte limit. Content-Length is checked first (cheap refusal of an
// honest client), and the limit is enforced again while reading, because a chunked or lying client
// can send more than it declares. Nothing beyond the limit is ever held in memory.
import { HerdError, badRequest } from "../core/errors.ts";

export const tooLarge = (limitBytes: number) =>
  new HerdError(413, "invalid_request_error", `request body exceeds the limit of ${limitBytes} bytes`, "request_too_large");

export async function readBodyLimited(req: Request, limitBytes: number): Promise<string> {
  const declared = req.headers.get("content-length");
  if (declared !== null) {
    const n = Number(declared);
    if (!Number.isFinite(n) || n < 0) throw badRequest("invalid Content-Length header", null, "invalid_header");
    if (n > limitBytes) throw tooLarge(limitBytes);
  }
  if (!req.body) return "";
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limitBytes) {
      void reader.cancel().catch(() => {});
      throw tooLarge(limitBytes);
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return new TextDecoder().decode(chunks[0]);
  const all = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.byteLength;
  }
  return new TextDecoder().decode(all);
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
