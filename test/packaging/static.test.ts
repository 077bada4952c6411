// Static checks of the packaging files: the shell scripts and the systemd unit (no build needed).
import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { peer } from "../helpers/peers.ts";
import { BUILD_SRC, INSTALL, REPO, UNIT, run } from "./helpers.ts";

const work = mkdtempSync(join(tmpdir(), "herd-packaging-static-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("scripts are clean", () => {
  test.skipIf(!peer("shellcheck", ["shellcheck", "--version"]))("shellcheck passes on build.sh and install.sh", () => {
    const r = run(["shellcheck", "--shell=sh", BUILD_SRC, INSTALL]);
    expect(r.out + r.err).toBe("");
    expect(r.code).toBe(0);
  }, 30_000);

  test.skipIf(!peer("shellcheck", ["shellcheck", "--version"]))("shellcheck passes on the CI scripts (.ci/run, .ci/without-peers)", () => {
    const r = run(["shellcheck", "--shell=bash", join(REPO, ".ci/run"), join(REPO, ".ci/without-peers")]);
    expect(r.out + r.err).toBe("");
    expect(r.code).toBe(0);
  }, 30_000);

  test("both scripts parse as POSIX sh", () => {
    for (const s of [BUILD_SRC, INSTALL]) expect(run(["sh", "-n", s]).code).toBe(0);
  }, 30_000);
});

describe("systemd unit", () => {
  const hasAnalyze = peer("systemd-analyze", ["systemd-analyze", "--version"]);

  // `verify` resolves ExecStart=/ExecReload= on this machine's file system. The unit names
  // /usr/local/bin/herd, which a CI box does not have, so a copy points ExecStart at an existing
  // executable. Unknown keys are only warnings (exit 0), so stderr must be empty too.
  test.skipIf(!hasAnalyze)("systemd-analyze verify passes", () => {
    const dir = join(work, "unit");
    mkdirSync(dir, { recursive: true });
    const fakeBin = join(dir, "herd");
    writeFileSync(fakeBin, "#!/bin/sh\nexit 0\n");
    chmodSync(fakeBin, 0o755);
    const text = readFileSync(UNIT, "utf8");
    expect(text).toContain("ExecStart=/usr/local/bin/herd run --config /etc/herd/herd.yaml\n");
    const copy = join(dir, "herd.service");
    writeFileSync(copy, text.replace("ExecStart=/usr/local/bin/herd ", `ExecStart=${fakeBin} `));
    const r = run(["systemd-analyze", "verify", copy]);
    expect(r.err + r.out).toBe("");
    expect(r.code).toBe(0);
  }, 30_000);

  test.skipIf(!hasAnalyze)("the shipped unit's only complaint on a host without herd is the missing binary", () => {
    if (existsSync("/usr/local/bin/herd")) return; // a real install: nothing to learn here
    const r = run(["systemd-analyze", "verify", UNIT]);
    const lines = (r.err + r.out).split("\n").filter((l) => l.trim() !== "");
    expect(lines).toEqual([expect.stringContaining("Command /usr/local/bin/herd is not executable")]);
  }, 30_000);

  test("timeouts cover the drain plus engine stop grace, and engine startup", async () => {
    const { defaultConfig } = await import("../../src/config/load.ts");
    const cfg = defaultConfig();
    const text = readFileSync(UNIT, "utf8");
    const stopS = Number(/^TimeoutStopSec=(\d+)s$/m.exec(text)?.[1]);
    expect(stopS * 1000).toBeGreaterThanOrEqual(cfg.frontend.drain_timeout_ms + cfg.supervisor.stop_timeout_ms + 10_000);
    // READY=1 waits for the first healthy engine, which may take up to startup_timeout_ms.
    const startMin = Number(/^TimeoutStartSec=(\d+)min$/m.exec(text)?.[1]);
    expect(startMin * 60_000).toBeGreaterThan(cfg.supervisor.startup_timeout_ms);
    // SIGTERM to herd alone (it drains, then stops its engines); SIGKILL to the cgroup at the end.
    expect(text).toMatch(/^KillMode=mixed$/m);
    expect(text).toMatch(/^Type=notify$/m);
    expect(text).toMatch(/^NotifyAccess=all$/m);
    // GPU device nodes must stay reachable.
    expect(text).not.toMatch(/^(PrivateDevices=yes|DevicePolicy=(closed|strict)|DeviceAllow=|ProtectClock=yes)/m);
  }, 30_000);
});
