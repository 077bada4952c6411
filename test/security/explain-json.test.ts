// Issue 22: POST /admin/route/explain parsed its body without the frontend's JSON guard, so a body
// nested 5M levels deep (or with millions of values) was parsed on the event loop. Now the same
// bounds as /v1/*: depth and value count refused with a 400 before any parse.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { MODEL, chatCompletion, startHerd, startUpstream, type Herd, type Upstream } from "../frontend/harness.ts";

let up: Upstream;
let h: Herd;
beforeAll(async () => {
  up = startUpstream(() => Response.json(chatCompletion("ok")));
  h = await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_json_values: 16_384 } });
});
afterAll(async () => {
  await h?.stop();
  await up?.stop();
});

const explain = (body: string) => fetch(`${h.url}/admin/route/explain`, { method: "POST", headers: { "content-type": "application/json" }, body });

test("deep nesting (inline and off the loop) and too many values are 400s; a normal explain still works", async () => {
  for (const depth of [10_000, 5_000_000]) {
    const r = await explain(`{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"x":${"[".repeat(depth)}${"]".repeat(depth)}}`);
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("json_too_deep");
  }
  const many = await explain(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], x: Array.from({ length: 20_000 }, () => 1) }));
  expect(many.status).toBe(400);
  expect(((await many.json()) as { error: { code: string } }).error.code).toBe("json_too_large");
  const ok = await explain(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }));
  expect(ok.status).toBe(200);
  expect(((await ok.json()) as { model: string }).model).toBe(MODEL);
});
