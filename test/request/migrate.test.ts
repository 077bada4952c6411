// Which streams request migration may continue elsewhere (src/request/migrate.ts notReplayable):
// only chat streams it can replay exactly; and how it passes events on before any migration.
import { describe, expect, test } from "bun:test";
import { MigratingSource, notReplayable } from "../../src/request/migrate.ts";
import type { Leg } from "../../src/request/plan.ts";
import type { ChunkSource, ReadResult } from "../../src/request/upstream.ts";

const leg = (body: Record<string, unknown>, over: Partial<Leg> = {}): Leg => ({
  name: "main", route: { model: "m", sessionId: null, promptTokens: 1 }, endpoint: "chat", body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }], ...body }), stream: true, maxTokens: 10, ...over,
});

test("chat streams migrate; what cannot be replayed exactly does not", () => {
  expect(notReplayable(leg({}))).toBeNull();
  expect(notReplayable(leg({ n: 1, logprobs: false, tools: [] }))).toBeNull();
  expect(notReplayable(leg({ n: 2 }))).toBe("n");
  expect(notReplayable(leg({ logprobs: true }))).toBe("logprobs");
  expect(notReplayable(leg({ top_logprobs: 3 }))).toBe("top_logprobs");
  expect(notReplayable(leg({ response_format: { type: "json_object" } }))).toBe("response_format");
  expect(notReplayable(leg({ guided_json: {} }))).toBe("guided_json");
  expect(notReplayable(leg({ structured_outputs: { json: {} } }))).toBe("structured_outputs");
  expect(notReplayable(leg({ tools: [{ type: "function" }] }))).toBe("tools");
  expect(notReplayable(leg({ continue_final_message: true }))).toBe("continue_final_message");
  expect(notReplayable(leg({}, { stream: false }))).toBe("not a chat stream");
  expect(notReplayable(leg({}, { endpoint: "completions" }))).toBe("not a chat stream");
});

// The MigratingSource's pass before any migration: whole-event chunks go on as the engine's own
// bytes (no re-encoding), anything else as the complete events it holds; the tap sees each event.
describe("MigratingSource pass-through", () => {
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const ev = (content: string) => `data: ${JSON.stringify({ id: "c1", choices: [{ index: 0, delta: { content } }] })}\n\n`;
  /** Reads every chunk of `chunks` through a MigratingSource; the outputs and what the tap saw. */
  async function through(chunks: Uint8Array[]): Promise<{ out: Uint8Array[]; seen: string[]; unreadable: number }> {
    const queue = [...chunks];
    const body: ChunkSource<Uint8Array> = { read: (cb) => { const c = queue.shift(); cb(c === undefined ? { done: true } : { done: false, value: c }); }, cancel: () => {} };
    const src = new MigratingSource({} as never, {} as never, leg({}), "r1", { limit: 3, maxTokens: 100 }, { workerId: "w", ac: new AbortController(), body });
    const seen: string[] = [];
    let unreadable = 0;
    src.tap = { event: (o) => seen.push(o.choices?.[0]?.delta?.content ?? "?"), unreadable: () => unreadable++ };
    const out: Uint8Array[] = [];
    // Read while chunks are left (these streams never send [DONE]: their end would be a failure).
    while (queue.length > 0) {
      const r = await new Promise<ReadResult<Uint8Array>>((res) => src.read(res));
      if (r.done || "error" in r) break;
      out.push(r.value);
    }
    return { out, seen, unreadable };
  }

  test("a chunk of whole events is passed on as the same bytes", async () => {
    const chunk = enc.encode(ev("a") + ev("b"));
    const { out, seen } = await through([chunk]);
    expect(out).toHaveLength(1);
    expect(out[0]).toBe(chunk);
    expect(seen).toEqual(["a", "b"]);
  });

  test("split events, CRLF line ends and a character split across chunks come out as whole events, in order", async () => {
    const text = ev("héllo") + ev("wörld") + ev("!");
    const bytes = enc.encode(text);
    const cut = bytes.indexOf(0xc3) + 1; // inside é's two bytes
    const { out, seen } = await through([bytes.slice(0, cut), bytes.slice(cut, cut + 40), bytes.slice(cut + 40)]);
    expect(out.map((c) => dec.decode(c)).join("")).toBe(text);
    expect(seen).toEqual(["héllo", "wörld", "!"]);
    const crlf = enc.encode(ev("x").replaceAll("\n", "\r\n"));
    const r = await through([crlf]);
    expect(r.out.map((c) => dec.decode(c))).toEqual([ev("x")]);
  });
});
