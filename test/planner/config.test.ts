// The `planner` config section: defaults from the simulation, and every cross-key mistake named by
// key path and file line.
import { describe, expect, test } from "bun:test";
import { defaultConfig, parseConfigText } from "../../src/config/index.ts";
import { parseFloor } from "../../src/config/planner-checks.ts";
import { checkEngines } from "../../src/engine/check.ts";
import { DEFAULT_PLANNER, DEFAULT_POOL } from "../../src/simulate/planner-day/compare.ts";

const env = { hostname: "h", dataDir: "/tmp/herd-planner-config" };
const yaml = (...lines: string[]) => lines.join("\n") + "\n";
const HEAD = ["models:", "  - name: m", "engines:", "  - kind: sim", "    model: m", "  - kind: external", "    model: m", "    url: http://10.0.0.1:8000", "    role: decode"];

describe("planner config", () => {
  test("defaults are the simulation's", () => {
    const p = defaultConfig(env).planner;
    expect(p.enabled).toBe(false);
    expect(p.dry_run).toBe(false);
    expect(p.utilization_target).toBe(DEFAULT_PLANNER.utilizationTarget);
    expect(p.down_headroom).toBe(DEFAULT_PLANNER.downHeadroom);
    expect([p.stable_window_ms, p.panic_window_ms, p.down_window_ms, p.down_step_ms, p.up_hold_ms, p.idle_to_sleep_ms, p.sleep_to_stop_ms]).toEqual([
      DEFAULT_PLANNER.stableWindowMs, DEFAULT_PLANNER.panicWindowMs, DEFAULT_PLANNER.downWindowMs, DEFAULT_PLANNER.downStepMs,
      DEFAULT_PLANNER.upHoldMs, DEFAULT_PLANNER.idleToSleepMs, DEFAULT_PLANNER.sleepToStopMs,
    ]);
    const c = parseConfigText(yaml(...HEAD, "planner:", "  pools:", "    - engine: 0"), "herd.yaml", env).config!;
    expect(c.planner.pools[0]).toEqual({
      engine: 0, min: 0, max: 4, prefill_tokens_per_s: DEFAULT_POOL.capacity.prefillTokensPerS, decode_tokens_per_s: DEFAULT_POOL.capacity.decodeTokensPerS,
      can_sleep: false, floors: [], pin: -1,
    });
  });

  const cases: { name: string; lines: string[]; path: string; line: number; message: RegExp; severity?: "warning" }[] = [
    { name: "engine index out of range", lines: ["  pools:", "    - engine: 5"], path: "planner.pools[0].engine", line: 12, message: /no engines\[5\]/ },
    { name: "external engine", lines: ["  pools:", "    - engine: 1"], path: "planner.pools[0].engine", line: 12, message: /external/ },
    { name: "two pools for one entry", lines: ["  pools:", "    - engine: 0", "    - engine: 0"], path: "planner.pools[1].engine", line: 13, message: /already has a pool/ },
    { name: "min above max", lines: ["  pools:", "    - engine: 0", "      min: 3", "      max: 2"], path: "planner.pools[0].min", line: 13, message: /must not exceed max/ },
    { name: "pin above max", lines: ["  pools:", "    - engine: 0", "      pin: 9", "      max: 2"], path: "planner.pools[0].pin", line: 13, message: /must not exceed max/ },
    { name: "malformed floor", lines: ["  pools:", "    - engine: 0", "      floors: [\"8-20=1\"]"], path: "planner.pools[0].floors[0]", line: 13, message: /HH:MM-HH:MM=N/ },
    { name: "floor above max", lines: ["  pools:", "    - engine: 0", "      max: 2", "      floors: [\"08:00-20:00=3\"]"], path: "planner.pools[0].floors[0]", line: 14, message: /above max/, severity: "warning" },
    { name: "enabled without pools", lines: ["  enabled: true"], path: "planner.pools", line: 10, message: /no pools/, severity: "warning" },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const r = parseConfigText(yaml(...HEAD, "planner:", ...c.lines), "herd.yaml", env);
      // What `herd config check` reports: the config's findings and the drivers' (src/engine/check.ts).
      const all = r.config ? [...r.findings, ...checkEngines(r.config, { ids: [], source: "given" }, r.lineOf)] : r.findings;
      const f = all.find((x) => x.path === c.path);
      expect(f, JSON.stringify(all)).toBeDefined();
      expect(f!.message).toMatch(c.message);
      expect(f!.line).toBe(c.line);
      expect(f!.severity).toBe(c.severity ?? "error");
    });
  }

  test("can_sleep only for kinds with a sleep mode; pools only on engines herd starts (the drivers' capabilities)", () => {
    const text = yaml("models:", "  - name: m", "engines:", "  - kind: command", "    model: m", "    command: [x, \"{port}\"]", "  - kind: external", "    model: m", "    url: http://10.0.0.1:8000", "    role: decode", "planner:", "  pools:", "    - engine: 0", "      can_sleep: true", "    - engine: 1");
    const r = parseConfigText(text, "herd.yaml", env);
    const found = checkEngines(r.config!, { ids: [], source: "given" }, r.lineOf).filter((f) => f.severity === "error");
    expect(found.map((f) => [f.path, f.line])).toEqual([["planner.pools[0].can_sleep", 14], ["planner.pools[1].engine", 15]]);
    expect(found[0]!.message).toBe("command engines have no sleep mode herd can drive (only sim, vllm)");
    const sleeper = parseConfigText(text.replace("kind: command", "kind: sim").replace(/    command: .*\n/, ""), "herd.yaml", env);
    expect(checkEngines(sleeper.config!, { ids: [], source: "given" }).filter((f) => f.path.endsWith("can_sleep"))).toEqual([]);
  });

  test("floors parse to seconds since midnight, wrapping allowed", () => {
    expect(parseFloor("08:30-20:00=2")).toEqual({ fromS: 30_600, toS: 72_000, min: 2 });
    expect(parseFloor("22:00-06:00=1")).toEqual({ fromS: 79_200, toS: 21_600, min: 1 });
    expect(parseFloor("00:00-24:00=1")).toEqual({ fromS: 0, toS: 86_400, min: 1 });
    expect(parseFloor("24:00-01:00=1")).toBeNull();
  });
});
