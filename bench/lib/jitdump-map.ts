// Turns a JavaScriptCore jitdump (written when Bun runs with BUN_JSC_useJITDump=1) into a perf map
// (/tmp/perf-<pid>.map: "start size name" per line, hex), so `perf report` / `perf script` name the
// JIT frames of a herd or proxy process (docs/benchmarks.md, "Where herd's native CPU goes").
// Needed because Bun 1.4's JSC names the dump /tmp/jit-<tid>-<pid>-<random>, and `perf inject --jit`
// only picks up files named jit-<pid>.dump. Record layout: the jitdump specification in the Linux
// tree (tools/perf/Documentation/jitdump-specification.txt): a header whose third u32 is its size,
// then records {id u32, total_size u32, timestamp u64}; id 0 (JIT_CODE_LOAD) continues with
// pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index u64, a NUL-ended name, code.
// Run: bun bench/lib/jitdump-map.ts /tmp/jit-<tid>-<pid>-XXXX /tmp/perf-<pid>.map
import { readFileSync, writeFileSync } from "node:fs";

const [src, dst] = process.argv.slice(2);
if (!src || !dst) throw new Error("usage: jitdump-map.ts <jitdump file> <perf map to write>");
const b = readFileSync(src);
if (b.length < 12 || b.readUInt32LE(0) !== 0x4a695444) throw new Error(`${src}: not a little-endian jitdump (magic 0x4A695444)`);
const lines: string[] = [];
for (let off = b.readUInt32LE(8); off + 16 <= b.length; ) {
  const id = b.readUInt32LE(off);
  const size = b.readUInt32LE(off + 4);
  if (size < 16 || off + size > b.length) break; // a record cut by the process still writing
  if (id === 0) {
    const addr = b.readBigUInt64LE(off + 16 + 16);
    const codeSize = b.readBigUInt64LE(off + 16 + 24);
    const nameAt = off + 16 + 40;
    const end = b.indexOf(0, nameAt);
    const name = b.toString("utf8", nameAt, end < 0 || end > off + size ? off + size : end).replaceAll(" ", "_");
    lines.push(`${addr.toString(16)} ${codeSize.toString(16)} ${name}`);
  }
  off += size;
}
writeFileSync(dst, lines.join("\n") + "\n");
console.log(`${lines.length} code loads → ${dst}`);
