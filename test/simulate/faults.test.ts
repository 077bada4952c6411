// The whole-system seeded fault simulation (src/simulate/faults): a few hundred seeds hold every
// invariant; a seed is its run (byte-identical event log); and the checker can fail — each
// deliberate bug (a skipped resync clear, forgotten votes, no assignment dedupe) is caught within
// a bounded number of seeds, and the failing seed reproduces the same log and violations.
import { describe, expect, test } from "bun:test";
import { defaultConfig } from "../../src/config/index.ts";
import { runFaultSeed, type FaultRunOptions } from "../../src/simulate/faults/run.ts";
import { FAULT_KINDS } from "../../src/simulate/faults/schedule.ts";

const config = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-faults-test" });
const CI: FaultRunOptions = { nodes: 3, engines: 3, requests: 20, faults: 8, spanMs: 6000, config };

/** The first seed in 1..max whose run breaks an invariant, or null. */
async function firstFailing(o: FaultRunOptions, max: number): Promise<number | null> {
  for (let s = 1; s <= max; s++) if (!(await runFaultSeed(s, o)).ok) return s;
  return null;
}

describe("seeded fault simulation", () => {
  test("200 seeds: every invariant holds under every kind of fault", async () => {
    const failing: string[] = [];
    const injected = new Map<string, number>();
    let checks = 0;
    let requests = 0;
    for (let s = 1; s <= 200; s++) {
      const r = await runFaultSeed(s, CI);
      if (!r.ok) failing.push(`seed ${s}: ${r.violations.map((v) => `${v.invariant} ${v.detail}`).join("; ")}`);
      for (const [k, n] of Object.entries(r.injected)) injected.set(k, (injected.get(k) ?? 0) + n);
      checks += r.checks;
      requests += r.requests.sent;
    }
    expect(failing).toEqual([]);
    for (const k of FAULT_KINDS) expect(injected.get(k) ?? 0).toBeGreaterThan(20);
    expect(requests).toBe(200 * CI.requests);
    expect(checks).toBeGreaterThan(200 * CI.requests);
  }, 180_000);

  test("50 seeds of P/D plans (runPd over VirtualPd, 2 prefill + 2 decode engines): every invariant holds", async () => {
    const o: FaultRunOptions = { ...CI, engines: 4, pd: true };
    const failing: string[] = [];
    let transfers = 0;
    for (let s = 1; s <= 50; s++) {
      const r = await runFaultSeed(s, o);
      if (!r.ok) failing.push(`seed ${s}: ${r.violations.map((v) => `${v.invariant} ${v.detail}`).join("; ")}`);
      transfers += r.pd.transfers;
    }
    expect(failing).toEqual([]);
    expect(transfers).toBeGreaterThan(50 * 10);
  }, 120_000);

  test("same seed → byte-identical event log; another seed → another run", async () => {
    const a = await runFaultSeed(7, CI);
    const b = await runFaultSeed(7, CI);
    expect(b.log).toBe(a.log);
    expect(b.injected).toEqual(a.injected);
    expect(a.log).toContain("FAULT ");
    expect(a.log).toContain("leader ");
    expect((await runFaultSeed(8, CI)).log).not.toBe(a.log);
  }, 30_000);

  const bugs: [string, FaultRunOptions, number][] = [
    ["skipped resync clear → stale_block", { ...CI, kinds: ["lost_kv", "kill_engine"], bugs: { skipResyncClear: true } }, 30],
    ["forgotten votes → two leaders in a term", { ...CI, requests: 5, faults: 16, kinds: ["kill_node", "partition", "pause_node"], bugs: { forgetVotes: true } }, 30],
    ["no assignment dedupe → double actuation", { ...CI, bugs: { noDedupe: true } }, 10],
  ];
  for (const [name, o, within] of bugs) {
    test(`a deliberate bug is caught within ${within} seeds and its seed reproduces: ${name}`, async () => {
      const seed = await firstFailing(o, within);
      expect(seed).not.toBeNull();
      const a = await runFaultSeed(seed!, o);
      const b = await runFaultSeed(seed!, o);
      expect(a.ok).toBe(false);
      expect(b.log).toBe(a.log);
      expect(b.violations).toEqual(a.violations);
      expect(a.log).toContain("VIOLATION ");
      const want = name.includes("stale") ? "stale_block" : name.includes("leaders") ? "one_leader_per_term" : "no_double_actuation";
      expect(a.violations.map((v) => v.invariant)).toContain(want);
      // The same seed without the bug holds every invariant: the bug, not the seed, broke it.
      const { bugs: _, ...fixed } = o;
      expect((await runFaultSeed(seed!, fixed)).violations).toEqual([]);
    }, 120_000);
  }
});
