// Preloaded into herd by bench/frontend-allocs.ts (`bun --preload`): on SIGUSR2 writes bun:jsc
// heapStats().objectTypeCounts (https://bun.sh/docs/project/benchmarking#measuring-memory-usage) as
// JSON to $HERD_HEAP_HOOK_FILE, after a full GC or none (then cells made since the last GC are still
// counted); the bench reads herd's object counts without a debug route in src/.
import { existsSync, renameSync, writeFileSync } from "node:fs";
import { heapStats } from "bun:jsc";

const file = process.env.HERD_HEAP_HOOK_FILE;
if (file) {
  process.on("SIGUSR2", () => {
    // "<file>.gc" present: full collection first (the round's start), else none (the round's end).
    if (existsSync(`${file}.gc`)) Bun.gc(true);
    writeFileSync(`${file}.tmp`, JSON.stringify(heapStats().objectTypeCounts));
    renameSync(`${file}.tmp`, file);
  });
}
