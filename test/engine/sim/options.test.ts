import { describe, expect, test } from "bun:test";
import { DEFAULT_COST, ZERO_COST } from "../../../src/engine/sim/cost.ts";
import { DEFAULT_OPTIONS, parseSimArgs, simUsage } from "../../../src/engine/sim/options.ts";

describe("parseSimArgs", () => {
  test("defaults describe one 8B model on one H100", () => {
    expect(parseSimArgs([])).toEqual(DEFAULT_OPTIONS);
    expect(DEFAULT_OPTIONS).toMatchObject({ blockSize: 16, kvBlocks: 24_700, maxNumSeqs: 1024, maxNumBatchedTokens: 8192 });
    expect(DEFAULT_OPTIONS.cost).toEqual(DEFAULT_COST);
  });

  test("--flag value and --flag=value, the supervisor's flags, timing figures", () => {
    const o = parseSimArgs([
      "--host", "0.0.0.0", "--port=0", "--model", "qwen3-8b", "--block-size", "32", "--kv-blocks=100", "--max-model-len", "4096",
      "--tokenizer", "/models/q", "--time-scale", "20", "--step-ms", "2.5", "--fail-after", "3", "--startup-delay-ms", "50",
    ])!;
    expect(o).toMatchObject({ host: "0.0.0.0", port: 0, model: "qwen3-8b", blockSize: 32, kvBlocks: 100, maxModelLen: 4096, tokenizer: "/models/q", timeScale: 20, failAfter: 3, startupDelayMs: 50 });
    expect(o.cost.stepMs).toBe(2.5);
    expect(parseSimArgs(["--served-model-name", "x"])!.model).toBe("x");
  });

  test("--zero-delay zeroes every figure; an explicit figure still applies on top", () => {
    expect(parseSimArgs(["--zero-delay"])!.cost).toEqual(ZERO_COST);
    expect(parseSimArgs(["--weights-ms", "3", "--zero-delay"])!.cost).toEqual({ ...ZERO_COST, weightsMs: 3 });
  });

  test("bad input is a UsageError naming the flag", () => {
    expect(() => parseSimArgs(["--nope"])).toThrow("unknown flag --nope");
    expect(() => parseSimArgs(["--port"])).toThrow("--port needs a value");
    expect(() => parseSimArgs(["--block-size", "1.5"])).toThrow("expected an integer");
    expect(() => parseSimArgs(["--kv-blocks", "0"])).toThrow("at least 1");
    expect(() => parseSimArgs(["--time-scale", "0"])).toThrow("greater than 0");
    expect(() => parseSimArgs(["--zero-delay=1"])).toThrow("takes no value");
    expect(() => parseSimArgs(["stray"])).toThrow("unexpected argument");
  });

  test("--help returns null and the usage lists every flag", () => {
    expect(parseSimArgs(["--model", "x", "--help"])).toBeNull();
    for (const f of ["--kv-blocks", "--time-scale", "--zero-delay", "--crash-after", "--startup-delay-ms", "--pair-ms"]) expect(simUsage()).toContain(f);
  });
});
