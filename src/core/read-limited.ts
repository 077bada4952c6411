// Reading an HTTP body (request or response) as text under a byte limit, enforced while reading:
// a chunked or lying peer can send more than it declares, and nothing beyond the limit is ever
// held in memory. Used by the frontend for client request bodies and by src/engine/telemetry/scrape.ts for
// engine /metrics pages.
import { closeSync, constants as fsConstants, fstatSync, openSync, readSync } from "node:fs";

/** Reads `body` to a UTF-8 string; past `limitBytes` it cancels the stream and throws `overLimit()`. */
export async function readTextLimited(body: ReadableStream<Uint8Array> | null, limitBytes: number, overLimit: () => Error): Promise<string> {
  if (!body) return "";
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limitBytes) {
      void reader.cancel().catch(() => {});
      throw overLimit();
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

/**
 * A small secret or settings file (a token file) as text: only a regular file (opened non-blocking,
 * checked on the fd, so a FIFO cannot block and /dev/zero cannot fill memory), at most `maxBytes`.
 * Throws an Error saying why otherwise.
 */
export function readSmallFileSync(path: string, maxBytes: number): string {
  const fd = openSync(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(st.isDirectory() ? "is a directory" : "not a regular file");
    const buf = Buffer.alloc(maxBytes + 1);
    let n = 0;
    for (;;) {
      const got = readSync(fd, buf, n, buf.length - n, n);
      if (got === 0) break;
      n += got;
      if (n > maxBytes) throw new Error(`larger than ${maxBytes} bytes`);
    }
    return buf.subarray(0, n).toString("utf8");
  } finally {
    closeSync(fd);
  }
}
