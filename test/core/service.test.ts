import { describe, expect, test } from "bun:test";
import { ServiceGroup, service, ServiceStartError } from "../../src/core/service.ts";
import { resolveSeed, seedFor } from "../../src/core/seed.ts";

function recorder() {
  const events: string[] = [];
  const mk = (name: string, failStart = false, failStop = false) =>
    service(
      name,
      async () => {
        events.push(`start ${name}`);
        if (failStart) throw new Error(`${name} broke`);
      },
      () => {
        events.push(`stop ${name}`);
        if (failStop) throw new Error(`${name} stop broke`);
      },
    );
  return { events, mk };
}

describe("ServiceGroup", () => {
  test("starts in order and stops in reverse, once", async () => {
    const { events, mk } = recorder();
    const g = new ServiceGroup([mk("a"), mk("b"), mk("c")]);
    await g.start();
    expect(g.running).toEqual(["a", "b", "c"]);
    await Promise.all([g.stop(), g.stop()]);
    await g.stop();
    expect(events).toEqual(["start a", "start b", "start c", "stop c", "stop b", "stop a"]);
    expect(g.running).toEqual([]);
  });

  test("a failed start stops what started (the failed one included) in reverse and names the service", async () => {
    const { events, mk } = recorder();
    const g = new ServiceGroup([mk("a"), mk("b", true), mk("c")]);
    const err = await g.start().catch((e) => e);
    expect(err).toBeInstanceOf(ServiceStartError);
    expect(err.message).toBe("b: b broke");
    expect(events).toEqual(["start a", "start b", "stop b", "stop a"]);
  });

  test("a throwing stop does not keep the others from stopping", async () => {
    const { events, mk } = recorder();
    const g = new ServiceGroup([mk("a"), mk("b", false, true), mk("c")]);
    await g.start();
    await g.stop();
    expect(events.slice(3)).toEqual(["stop c", "stop b", "stop a"]);
  });
});

describe("seed", () => {
  test("HERD_SEED wins over config, config over entropy; bad values are refused", () => {
    expect(resolveSeed(7, { HERD_SEED: "42" })).toEqual({ seed: 42, source: "env" });
    expect(resolveSeed(7, {})).toEqual({ seed: 7, source: "config" });
    const e = resolveSeed(0, {});
    expect(e.source).toBe("entropy");
    expect(e.seed).toBeGreaterThan(0);
    expect(() => resolveSeed(0, { HERD_SEED: "x" })).toThrow(/HERD_SEED/);
    expect(() => resolveSeed(0, { HERD_SEED: "0" })).toThrow(/HERD_SEED/);
  });

  test("component streams differ by name and are stable for a seed", () => {
    expect(seedFor(1, "router")).toBe(seedFor(1, "router"));
    expect(seedFor(1, "router")).not.toBe(seedFor(1, "zmtp"));
    expect(seedFor(1, "router")).not.toBe(seedFor(2, "router"));
    expect(seedFor(1, "router")).toBeGreaterThan(0);
  });
});
