// LoRA adapters through herd run: a request naming an adapter runs on its base model's engines (the
// sim serves the adapter like vLLM's --lora-modules), /v1/models lists it with its parent, and its
// KV blocks hash with the adapter's name, so the base model's cache is never credited to it.
import { afterAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { join } from "node:path";
import { cleanup, startHerd, tempDir, type HerdProc } from "../helpers/herd.ts";

describe("LoRA adapters in herd run", () => {
  const dir = tempDir("herd-lora-e2e-");
  let herd: HerdProc | null = null;
  afterAll(async () => {
    await herd?.stop();
    cleanup(dir);
  });

  test("an adapter's request is served by the base model's engine; explain hashes it apart from the base", async () => {
    const port = 24_000 + Math.floor(Math.random() * 5_000);
    herd = await startHerd(dir, `node: { data_dir: ${JSON.stringify(join(dir, "data"))} }
models: [{ name: base-m, path: base-m, lora_adapters: [{ name: base-m-sql, path: /models/sql-lora }] }]
engines: [{ kind: sim, model: base-m, count: 1, args: ["--time-scale", "20"] }]
supervisor: { port_range_start: ${port} }
`);
    const client = new OpenAI({ baseURL: `${herd.url}/v1`, apiKey: "none", maxRetries: 0 });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id).sort()).toEqual(["base-m", "base-m-sql"]);
    expect((models.data.find((m) => m.id === "base-m-sql") as unknown as { parent: string }).parent).toBe("base-m");
    const stream = await client.chat.completions.create({ model: "base-m-sql", messages: [{ role: "user", content: "select 1" }], max_tokens: 4, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text.length).toBeGreaterThan(0);
    const explain = async (model: string) =>
      (await (await fetch(`${herd!.url}/admin/route/explain`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, prompt: "a shared prefix ".repeat(40) }) })).json()) as {
        chosen: string; kv: { extra_keys?: unknown } | null; request: { hashed_blocks: number } | null;
      };
    const a = await explain("base-m");
    const b = await explain("base-m-sql");
    expect(b.chosen).toBe(a.chosen); // the same engine serves both
    expect(JSON.stringify(b.kv?.extra_keys)).toContain("base-m-sql");
    expect(JSON.stringify(a.kv?.extra_keys ?? null)).not.toContain("base-m-sql");
  }, 60_000);
});
