// One live-config handle (src/config/live.ts) for everything the node wires: a SIGHUP reload
// (reloadConfig, the handler's own code path) changes router.kv.prefill_load_scale,
// router.kv.overlap_credit, router.pd (a leg's pipeline) and frontend.first_token_timeout_ms, and every consumer sees the new
// values — aggregated routing and its explain, the P/D legs' presets and P/D explain, and a P/D
// request's leg bounds. Before issue 19 P/D kept the start-up copies. No engines: workers are put
// in the registry by hand (P/D ones at a server that never answers), so the node is not started.
import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";
import { loadConfigFile } from "../../src/config/load.ts";
import { HerdNode } from "../../src/daemon/node.ts";
import { reloadConfig } from "../../src/daemon/signals.ts";
import { emptyLoad, type Worker } from "../../src/workers/worker.ts";
import { cleanup, tempDir } from "./helpers.ts";

const dir = tempDir("herd-live-");
afterAll(() => cleanup(dir));

const yaml = (extra: string) => `node: { name: n1, data_dir: ${JSON.stringify(join(dir, "data"))} }
models: [{ name: agg }, { name: pd }]
engines: []
${extra}`;
const START = yaml(`frontend: { first_token_timeout_ms: 600000 }
router: { kv: { prefill_load_scale: 8, overlap_credit: { gpu: 1, cpu: 0.75, disk: 0.25 } } }`);
const RELOADED = yaml(`frontend: { first_token_timeout_ms: 300 }
router:
  kv: { prefill_load_scale: 2, overlap_credit: { gpu: 1, cpu: 0.25, disk: 0.25 } }
  pd: { decode: { filters: [], scorers: [{ type: load, weight: 1 }], picker: lightest } }`);

const PROMPT = "Explain: " + "lorem ipsum dolor sit amet ".repeat(200);
const r3 = (x: number) => Math.round(x * 1000) / 1000;

describe("SIGHUP reaches every consumer", () => {
  test("aggregated routing, P/D legs, both explains and a P/D request's leg bounds read the reloaded keys", async () => {
    const hung = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Promise<Response>(() => {}) });
    const file = join(dir, "herd.yaml");
    writeFileSync(file, START);
    const loaded = await loadConfigFile(file);
    expect(loaded.config).toBeDefined();
    const log = createLogger("test", { level: "error" });
    const node = new HerdNode(loaded.config!, { configPath: file, log, clock: new RealClock(), seed: 7, notify: { enabled: false, send() {} } });
    try {
      const w = (id: string, model: string, role: Worker["role"]): Worker => ({ id, node: "n1", model, role, kind: "sim", url: `http://127.0.0.1:${hung.port}`, state: "ready", restarts: 0, load: emptyLoad() });
      for (const x of [w("n1/a0", "agg", "aggregated"), w("n1/a1", "agg", "aggregated"), w("n1/p0", "pd", "prefill"), w("n1/d0", "pd", "decode")]) node.registry.upsert(x);
      // a0 holds the prompt's blocks on CPU: its credit is overlap_credit.cpu per block.
      const prepared = await node.prompts.prepare("agg", { prompt: PROMPT });
      node.kv.index.apply("n1/a0", { kind: "stored", medium: "cpu", hashes: prepared.blockHashes });
      node.kv.index.apply("n1/p0", { kind: "stored", medium: "cpu", hashes: prepared.blockHashes });
      const blocks = prepared.blockHashes.length;
      expect(blocks).toBeGreaterThan(4);

      const explain = async (model: string): Promise<any> =>
        (await node.frontend.app.fetch(new Request("http://127.0.0.1/admin/route/explain", { method: "POST", body: JSON.stringify({ model, prompt: PROMPT }) }), { ip: "127.0.0.1" })).json();
      /** Every kv-cost candidate's cost follows its printed terms at these knobs. */
      const expectKnobs = (terms: any, scale: number, cpuCredit: number, cpuBlocks: number) => {
        expect(terms.credit_blocks).toBe(r3(cpuCredit * cpuBlocks));
        expect(terms.kv_cost).toBeCloseTo(scale * terms.prefill_blocks + terms.decode_blocks, 1); // printed terms are rounded to 3 places
      };
      const seen = async (scale: number, cpu: number, decodeScorer: string) => {
        // Aggregated: the frontend's router (explain reads the one the frontend routes with) and a live decision.
        const agg = await explain("agg");
        expect(agg.policy).toBe("kv");
        expectKnobs(agg.candidates.find((c: any) => c.worker === "n1/a0").terms, scale, cpu, blocks);
        const routed = node.router.route({ model: "agg", sessionId: null, promptTokens: prepared.tokens, blockHashes: prepared.blockHashes, blockSize: 16, exclude: new Set() });
        expectKnobs(routed.decision.candidates.find((c) => c.worker === "n1/a0")!.terms, scale, cpu, blocks);
        // P/D explain: the prefill leg's preset reads the same knobs.
        const pd = await explain("pd");
        expect(pd.legs.map((l: any) => l.policy)).toEqual(["pd-prefill", "pd-decode"]);
        expectKnobs(pd.legs[0].candidates[0].terms, scale, cpu, blocks);
        // router.pd: the decode leg's pipeline as configured.
        expect(pd.legs[1].candidates[0].terms).toHaveProperty(`${decodeScorer}_weighted`);
      };
      await seen(8, 0.75, "decode-load");

      writeFileSync(file, RELOADED);
      await reloadConfig(file, { overrides: {}, running: node.running, maxBodyBytesLive: node.running.frontend.max_body_bytes, log, apply: (next) => node.apply(next) });
      expect(node.running.frontend.first_token_timeout_ms).toBe(300);
      await seen(2, 0.25, "load");

      // A P/D request: its legs are bounded by the reloaded first_token_timeout_ms (the engine never answers).
      const res = await node.frontend.app.fetch(
        new Request("http://127.0.0.1/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "pd", prompt: PROMPT, max_tokens: 4 }) }),
        { ip: "127.0.0.1" },
      );
      expect(res.status).toBe(502);
      const trace = node.pdTraces.at(-1)!.trace;
      expect(trace.legs[0]!.name).toBe("prefill");
      for (const l of trace.legs) expect(l.reason).toContain("within 300 ms");
      expectKnobs(trace.legs[0]!.decision.candidates[0]!.terms, 2, 0.25, blocks);
    } finally {
      node.prompts.close();
      node.router.close();
      hung.stop(true);
    }
  }, 30_000);
});
