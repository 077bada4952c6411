// README's Measure figures come from bench/readme-figures.ts, which runs the section's own commands:
// the script must find them (a README edit that renames or drops them breaks the figures' source),
// and the figures block must name the script and a commit.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { readmeCommand } from "../../bench/readme-figures.ts";

const README = readFileSync(join(import.meta.dir, "../../README.md"), "utf8");

test("the script finds README's bench and simulate commands, and README names the script and commit", () => {
  const bench = readmeCommand(README, "bench");
  expect(bench[0]).toBe("bench");
  for (const flag of ["--url", "--workload", "--rate", "--json", "--svg"]) expect(bench).toContain(flag);
  expect(readmeCommand(README, "simulate")[0]).toBe("simulate");
  expect(README).toMatch(/Produced by `nice bun bench\/readme-figures\.ts`[\s\S]{0,200}at commit [0-9a-f]{12}\b/);
  expect(() => readmeCommand("## Measure\nnothing\n## Next\n", "bench")).toThrow(/no `npm run herd -- bench` command/);
});
