// One streamed chat completion read to its end, as the migration e2e tests check it: every chunk id
// seen, the concatenated content, the count of content deltas (`onDelta` sees the running count, so a
// test can kill an engine or stop a node mid-stream), the usage, the last error event and whether
// [DONE] arrived. A non-200 answer is returned as an error, without reading a stream.
export interface ChatStreamRead {
  ids: Set<string>;
  text: string;
  deltas: number;
  usage: any;
  error: string | null;
  done: boolean;
  /** The x-herd-worker header: the worker the first attempt went to. */
  worker: string;
}

export async function readChatStream(url: string, body: string, onDelta: (n: number) => void = () => {}): Promise<ChatStreamRead> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const out: ChatStreamRead = { ids: new Set(), text: "", deltas: 0, usage: null, error: null, done: false, worker: res.headers.get("x-herd-worker") ?? "" };
  if (res.status !== 200) return { ...out, error: `HTTP ${res.status}: ${await res.text()}` };
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of res.body as ReadableStream<Uint8Array>) {
    buf += dec.decode(chunk, { stream: true });
    for (let k = buf.indexOf("\n\n"); k >= 0; k = buf.indexOf("\n\n")) {
      const data = buf.slice(0, k).replace(/^data: ?/, "");
      buf = buf.slice(k + 2);
      if (data === "[DONE]") {
        out.done = true;
        continue;
      }
      const o = JSON.parse(data);
      if (o.error) out.error = JSON.stringify(o.error);
      if (o.id) out.ids.add(o.id);
      if (o.usage) out.usage = o.usage;
      const c = o.choices?.[0]?.delta?.content;
      if (typeof c === "string" && c !== "") {
        out.text += c;
        onDelta(++out.deltas);
      }
    }
  }
  return out;
}
