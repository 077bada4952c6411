import { describe, expect, test } from "bun:test";
import { LogTail, MAX_LINE_CHARS } from "../../src/engine/logtail.ts";

describe("LogTail", () => {
  test("keeps only the last N lines", () => {
    const t = new LogTail(3);
    t.push("stdout", "a\nb\nc\nd\ne\n");
    expect(t.lines()).toEqual(["c", "d", "e"]);
  });

  test("joins lines split across chunks, per stream, and strips CR", () => {
    const t = new LogTail(10);
    t.push("stdout", "hel");
    t.push("stderr", "warn: x");
    t.push("stdout", "lo\r\nwor");
    t.push("stderr", "yz\n");
    t.push("stdout", "ld\n");
    expect(t.lines()).toEqual(["hello", "warn: xyz", "world"]);
  });

  test("flush emits unterminated lines; herd markers interleave", () => {
    const t = new LogTail(10);
    t.push("stdout", "last words");
    t.flush();
    t.line("[herd: exited]");
    expect(t.lines()).toEqual(["last words", "[herd: exited]"]);
  });

  test("a runaway line without newline is split and memory stays bounded", () => {
    const t = new LogTail(4);
    t.push("stdout", "x".repeat(MAX_LINE_CHARS * 10 + 5));
    expect(t.lines().length).toBe(4);
    expect(t.lines().every((l) => l.length <= MAX_LINE_CHARS)).toBe(true);
  });

  test("capacity 0 keeps nothing", () => {
    const t = new LogTail(0);
    t.push("stdout", "a\nb\n");
    expect(t.lines()).toEqual([]);
  });
});
