// `npm test` must pass on a fresh machine that has none of the optional system peers (issue 18). Bun
// runs a describe's callback while collecting tests, even a skipped one, so a peer started there (or
// at a file's top level) throws before any skip applies and fails the whole run. This test parses
// every test file and fails when a process is spawned at collection time: outside a test body, a
// hook (beforeAll/beforeEach/afterAll/afterEach) or a helper function. `.ci/run` also runs the whole
// suite with the peers hidden, which catches what a static look cannot (a helper called while
// collecting).
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { collectionTimeSpawns, walk } from "./helpers/suite-lint.ts";

const TEST = resolve(import.meta.dir);
/** Probing for a peer is allowed while collecting (it decides the skip); using one is not. */
const ALLOWED = new Set(["helpers/peers.ts"]);
describe("test suite hygiene", () => {
  test("no test file starts a process while tests are being collected", () => {
    const bad: string[] = [];
    for (const file of walk(TEST)) {
      const rel = relative(TEST, file);
      if (ALLOWED.has(rel)) continue;
      bad.push(...collectionTimeSpawns(`test/${rel}`, readFileSync(file, "utf8")));
    }
    expect(bad).toEqual([]);
  });

  test("the check sees a spawn in a describe body and at top level, not in tests or hooks", () => {
    const src = `
      import { spawnSync } from "node:child_process";
      const top = spawnSync("a", []);
      describe.skipIf(!x)("d", () => {
        const bad = spawnSync("python3", ["gen.py"]);
        beforeAll(() => { spawnSync("ok-hook", []); });
        test("t", () => { Bun.spawnSync(["ok-test"]); });
        const helper = () => spawnSync("ok-helper", []);
      });`;
    const found = collectionTimeSpawns("x.test.ts", src);
    expect(found.length).toBe(2);
    expect(found[0]).toContain("x.test.ts:3:");
    expect(found[1]).toContain("x.test.ts:5:");
  });
});
