// Stop signals: one Ctrl-C delivered twice (terminal to the process group + a forwarding wrapper
// such as `bun run`) must still drain; a second signal well after the first stops without waiting.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { recordFor } from "../../src/engine/orphans.ts";
import { bootId } from "../../src/engine/procfs.ts";
import { DUPLICATE_WINDOW_MS, StopSignals } from "../../src/daemon/stop-signals.ts";
import { BUN, ROOT, cleanup, simConfigYaml, startHerd, tempDir, until, type HerdProc } from "./helpers.ts";

describe("StopSignals", () => {
  test("first stops, a repeat inside the window is a duplicate, a later one forces", () => {
    const s = new StopSignals(500);
    expect(s.sinceFirstMs(10)).toBe(0);
    expect(s.receive(1000)).toBe("stop");
    expect(s.receive(1002)).toBe("duplicate");
    expect(s.receive(1499)).toBe("duplicate");
    expect(s.sinceFirstMs(1499)).toBe(499);
    expect(s.receive(1500)).toBe("force");
    expect(s.receive(9000)).toBe("force");
    expect(DUPLICATE_WINDOW_MS).toBe(500);
  });
});

const running: { herd: HerdProc; dir: string }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.herd.stop();
    cleanup(r.dir);
  }
});

async function herdWithStream(node: string): Promise<{ herd: HerdProc; stream: Promise<string> }> {
  const dir = tempDir(`herd-sig-${node}-`);
  const herd = await startHerd(dir, simConfigYaml({ dir, node, simArgs: ["--time-scale", "4", "--output-len", "0"], extra: "" }));
  running.push({ herd, dir });
  const res = await fetch(`${herd.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    // ~1.5 s of tokens at time-scale 4: open while the signals arrive.
    body: JSON.stringify({ model: `${node}-sim`, prompt: "count with me", max_tokens: 700, ignore_eos: true, stream: true }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const first = await reader.read(); // the stream has really started
  expect(first.done).toBe(false);
  const dec = new TextDecoder();
  const stream = (async () => {
    let text = dec.decode(first.value);
    for (;;) {
      const r = await reader.read();
      if (r.done) return text;
      text += dec.decode(r.value, { stream: true });
    }
  })();
  return { herd, stream };
}

describe("herd run and SIGINT", () => {
  test("a second SIGINT right after the first (one Ctrl-C seen twice) still drains: the stream finishes, exit 0", async () => {
    const { herd, stream } = await herdWithStream("sig2");
    herd.proc.kill("SIGINT");
    // Two kill() calls in a row coalesce into one pending signal; the wrapper's copy arrives after
    // herd has handled the terminal's, so send the second once the first is seen.
    await herd.waitLog(/received SIGINT\n/, 2_000);
    herd.proc.kill("SIGINT");
    const text = await stream;
    expect(text.includes("data: [DONE]")).toBe(true);
    expect(text.includes('"error"')).toBe(false);
    expect((text.match(/"text":/g) ?? []).length).toBe(700);
    expect(await herd.proc.exited).toBe(0);
    const log = herd.log();
    expect(log).toContain("received SIGINT\n");
    expect(log).toMatch(/received SIGINT again \d+ ms after the first: the same stop request delivered twice/);
    expect(log).not.toContain("stopping without waiting");
    expect(log).toContain("herd stopped");
  }, 30_000);

  test("a second SIGINT after the window stops without waiting: the stream ends with an error event", async () => {
    const { herd, stream } = await herdWithStream("sigf");
    herd.proc.kill("SIGINT");
    await herd.waitLog(/draining in_flight=1/);
    await Bun.sleep(DUPLICATE_WINDOW_MS + 100);
    herd.proc.kill("SIGINT");
    const text = await stream;
    expect(text.slice(-400)).toContain("herd is stopping now");
    expect((text.match(/"text":/g) ?? []).length).toBeLessThan(700);
    expect(await herd.proc.exited).toBe(0);
    expect(herd.log()).toContain("received SIGINT again: stopping without waiting for open requests");
  }, 30_000);
});

describe("herd run and SIGHUP during startup", () => {
  test("a reload request while leftovers are being reaped neither kills herd nor is lost", async () => {
    const dir = tempDir("herd-sig-hup-");
    // A leftover "engine" from a previous herd that ignores SIGTERM: reaping it takes stop_timeout_ms.
    const stray = Bun.spawn(["setsid", "sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"], { stdio: ["ignore", "ignore", "ignore"] });
    try {
      await Bun.sleep(100);
      const rec = recordFor("hup/command-0", stray.pid, new Date().toISOString());
      expect(rec.pgid).toBe(stray.pid);
      mkdirSync(join(dir, "data", "run"), { recursive: true });
      // Written by a herd that no longer runs (pid 2^22+1 is above the default pid_max).
      writeFileSync(join(dir, "data", "run", "engines.json"), JSON.stringify({ herd: { pid: 4194305, startTicks: 1, bootId: bootId() }, engines: [rec] }));
      const yaml = simConfigYaml({ dir, node: "hup" }).replace("stop_timeout_ms: 2000", "stop_timeout_ms: 1500");
      writeFileSync(join(dir, "herd.yaml"), yaml);
      const proc = Bun.spawn([BUN, "src/cli.ts", "run", "--config", join(dir, "herd.yaml"), "--listen", "127.0.0.1:0"], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
      let log = "";
      const dec = new TextDecoder();
      const reading = (async () => {
        for await (const c of proc.stderr as ReadableStream<Uint8Array>) log += dec.decode(c, { stream: true });
      })();
      await until("the reaping to start", () => log.includes("left running by a previous herd"), 10_000);
      proc.kill("SIGHUP");
      await until("herd ready", () => log.includes("herd ready") || proc.exitCode !== null, 15_000);
      expect(proc.exitCode).toBeNull();
      await until("the deferred reload", () => log.includes("config reloaded: no changes"), 5_000);
      expect(log).toContain("received SIGHUP during startup");
      expect(log).toContain("sending SIGKILL");
      proc.kill("SIGTERM");
      expect(await proc.exited).toBe(0);
      await reading;
    } finally {
      if (stray.exitCode === null) stray.kill("SIGKILL");
      cleanup(dir);
    }
  }, 30_000);
});
