// The planner simulation on short traces (the full day runs in bench/): invariants are checked
// inside every tick (a violation throws), one seed gives one action log, constant load holds,
// zero traffic reaches zero. The engines are the sim engine's SimScheduler (fast-forwarded; its
// exactness is test/engine/sim/fast-forward.test.ts).
import { describe, expect, test } from "bun:test";
import { runFleetSim } from "../../src/simulate/planner-day/fleet-sim.ts";
import { HERD, emulatedLaw, staticLaw } from "../../src/simulate/planner-day/laws.ts";
import { specFor, type CompareOptions } from "../../src/simulate/planner-day/compare.ts";
import { parseRateShape } from "../../src/workload/rate-shapes.ts";

const o: CompareOptions = { planners: [], shape: "", durationS: null, seed: 3, gpus: 8, sloTtftS: 1, sloItlS: 0.05, staticTarget: 0.99, tickS: 10 };
const cap = { prefillTokensPerS: 2 * 1.5 * 2048, decodeTokensPerS: 2 * 1.5 * 128 };

describe("planner simulation", async () => {
  test("same seed, same action log; another seed, another trace", async () => {
    const shape = parseRateShape("burst:base=1,peak=8,every=600,length=60,duration=1800,isl=2048,osl=128");
    const a = await runFleetSim(specFor(shape, HERD, o, 1800, 1, cap));
    const b = await runFleetSim(specFor(shape, HERD, o, 1800, 1, cap));
    expect(a.actions.length).toBeGreaterThan(2);
    expect(b.actions).toEqual(a.actions);
    expect(b.gpu_seconds).toBe(a.gpu_seconds);
    const c = await runFleetSim(specFor(shape, HERD, { ...o, seed: 4 }, 1800, 1, cap));
    expect(c.requests).not.toBe(a.requests);
  });

  test("constant load: herd holds after settling (no flaps); dynamo's flat threshold flaps", async () => {
    const shape = parseRateShape("step:from=6,to=6,at=0,duration=3600,isl=2048,osl=128");
    const herd = await runFleetSim(specFor(shape, HERD, o, 3600, 1, cap));
    expect(herd.flaps).toBe(0);
    // Settled: after the first quarter hour at most a consolidation and one re-add (real summaries
    // lag the fleet by up to half a tick, so the start-up may overshoot by one engine).
    const late = herd.actions.filter((l) => Number(l.split(" ")[0]) > 900);
    expect(late.filter((l) => / (start|wake) /.test(l)).length).toBeLessThanOrEqual(1);
    expect(late.filter((l) => / (drain|sleep) /.test(l)).length).toBeLessThanOrEqual(1);
    expect(herd.slo_attainment).toBeGreaterThan(0.95);
    const dynamo = await runFleetSim(specFor(shape, emulatedLaw("dynamo-load")!, o, 3600, 1, cap));
    expect(dynamo.scale_events).toBeGreaterThan(herd.scale_events);
  });

  test("zero traffic after a burst: every engine sleeps or stops within the idle bound, nothing dropped", async () => {
    const shape = parseRateShape("burst:base=0,peak=4,every=3000,length=120,duration=3000,isl=1024,osl=64");
    const r = await runFleetSim(specFor(shape, HERD, o, 3000, 1, cap));
    // Sleep actions come within idleToSleepMs (300 s) + a tick of the burst's end (120 s).
    const sleeps = r.actions.filter((l) => / (sleep|drain) /.test(l)).map((l) => Number(l.split(" ")[0]));
    expect(sleeps.length).toBeGreaterThan(0);
    expect(Math.max(...sleeps)).toBeLessThanOrEqual(120 + 300 + 20);
    expect(r.dropped).toBe(0);
  });

  test("multi-host: a host dies and the leader stalls mid-scale-up; the fence refuses the deposed leader's start, no double start, invariants hold", async () => {
    const shape = parseRateShape("ramp:from=1,to=10,duration=2400,isl=2048,osl=128");
    const spec = { ...specFor(shape, HERD, { ...o, hostGpus: 2 }, 2400, 1, cap), faults: { hostDown: { host: "h1", atS: 900, backAtS: 1500 }, failover: { atS: 300, stallS: 20, deposedS: 30 } } };
    expect(spec.hosts.length).toBe(4);
    const r = await runFleetSim(spec);
    expect(r.leaders.length).toBeGreaterThanOrEqual(2); // the stall elected another leader at a higher term (h1 dying may elect a third)
    expect(r.refused).toBeGreaterThan(0); // the old leader's start on the wire was refused
    expect(r.double_starts).toBe(0);
    expect(r.duplicates).toBe(0);
    expect(r.slo_attainment).toBeGreaterThan(0.8);
  });

  test("static provisioning never scales; more engines never cost fewer GPU-seconds", async () => {
    const shape = parseRateShape("step:from=2,to=2,at=0,duration=600,isl=1024,osl=64");
    const two = await runFleetSim(specFor(shape, staticLaw(2), o, 600, 2, cap));
    const four = await runFleetSim(specFor(shape, staticLaw(4), o, 600, 4, cap));
    expect(two.scale_events).toBe(0);
    expect(four.gpu_seconds).toBeGreaterThan(two.gpu_seconds);
  });
});
