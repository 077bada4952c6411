// Writes config/herd.schema.json from the config spec (src/config/schema.ts).
// Run after changing the schema: `bun scripts/gen-schema.ts`; test/config/schema-file.test.ts fails
// while the committed file is stale. `--check` exits 1 instead of writing when it differs.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { renderJsonSchema } from "../src/config/json-schema.ts";

const target = join(import.meta.dir, "..", "config", "herd.schema.json");
const want = renderJsonSchema();
let have = "";
try {
  have = readFileSync(target, "utf8");
} catch {
  // missing file: written below (or reported by --check)
}
if (process.argv.includes("--check")) {
  if (have !== want) {
    console.error(`${target} is out of date; run: bun scripts/gen-schema.ts`);
    process.exit(1);
  }
  console.log(`${target} is up to date`);
} else if (have === want) {
  console.log(`${target} unchanged`);
} else {
  writeFileSync(target, want);
  console.log(`wrote ${target}`);
}
