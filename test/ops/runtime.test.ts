// Finding the running herd and keeping two herds apart (issue 11, "a newcomer's first hour"):
// the daemon writes node.data_dir/run/herd.json (address, pid); `herd status|drain|undrain|logs`
// use it before frontend.listen and :8000, so the port `herd run --listen` chose is found; a second
// herd on the same data dir is refused before it binds anything, with a message naming the first;
// a source checkout never defaults to the installed service's /var/lib/herd.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chooseDataDir, sourceCheckoutRoot } from "../../src/config/host.ts";
import { bootId, readStat } from "../../src/engine/procfs.ts";
import { resolveTarget } from "../../src/ops/client.ts";
import { RUNTIME_FILE_VERSION, runtimeFilePath, type RuntimeInfo } from "../../src/ops/runtime.ts";
import { cleanup, herdCli, simConfigYaml, startHerd, tempDir, type HerdProc } from "./helpers.ts";

const dir = tempDir("herd-runtime-");
const started: HerdProc[] = [];
afterAll(async () => {
  for (const h of started) await h.stop();
  cleanup(dir);
});

describe("the runtime file", () => {
  test("herd run --listen on a random port: ops commands without flags find it; a second herd on the data dir is refused, naming the first", async () => {
    const xdg = join(dir, "xdg");
    // The data dir is the default one a CLI run from this checkout computes (XDG_DATA_HOME/herd).
    const yaml = simConfigYaml({ dir, node: "rt", count: 1 }).replace(/data_dir: "[^"]*"/, `data_dir: ${JSON.stringify(join(xdg, "herd"))}`);
    const h = await startHerd(join(dir), yaml, ["--listen", "127.0.0.1:0"]);
    started.push(h);
    const info = JSON.parse(readFileSync(runtimeFilePath(join(xdg, "herd")), "utf8")) as RuntimeInfo;
    expect(info).toMatchObject({ version: RUNTIME_FILE_VERSION, pid: h.proc.pid, url: h.url, listen: "127.0.0.1:0", config: h.configPath });
    expect(info.program).toStartWith("source checkout ");

    const env = { XDG_DATA_HOME: xdg };
    const st = await herdCli(["status"], env);
    expect(st.err).toBe("");
    expect(st.code).toBe(0);
    expect(st.out).toMatch(/^node rt {2}policy /);
    // --config with a port-0 listen: only the runtime file in its data dir knows the port.
    const viaConfig = await herdCli(["status", "--json", "--config", h.configPath], env);
    expect(viaConfig.code).toBe(0);
    expect(JSON.parse(viaConfig.out).node).toBe("rt");
    // Short worker names work where the node prefix is unique.
    const drained = await herdCli(["drain", "sim-0"], env);
    expect(drained.out.trim()).toBe("rt/sim-0: drained (state draining)");
    expect((await herdCli(["undrain", "sim-0"], env)).code).toBe(0);
    expect((await herdCli(["logs", "sim-0", "-n", "5"], env)).code).toBe(0);

    // The same config again, on another port: refused before it listens or spawns.
    const second = Bun.spawnSync([process.execPath, "src/cli.ts", "run", "--config", h.configPath, "--listen", "127.0.0.1:0"], {
      cwd: join(import.meta.dir, "../.."), stdout: "pipe", stderr: "pipe", env: { ...process.env, ...env }, timeout: 20_000,
    });
    const err = second.stderr.toString() + second.stdout.toString();
    expect(second.exitCode).toBe(1);
    expect(err).toContain(`node.data_dir ${join(xdg, "herd")} belongs to another herd (pid ${h.proc.pid}, listening on ${h.url}, config ${h.configPath}`);
    expect(err).not.toContain("listening\"");
    expect(err).not.toMatch(/"msg":"listening"|info\s+herd: listening/);
    // The first one's file is untouched and it still answers.
    expect((JSON.parse(readFileSync(runtimeFilePath(join(xdg, "herd")), "utf8")) as RuntimeInfo).pid).toBe(h.proc.pid);

    await h.stop();
    expect(existsSync(runtimeFilePath(join(xdg, "herd")))).toBe(false); // removed at a clean stop
    const gone = await herdCli(["status", "--url", h.url], env);
    expect(gone.code).toBe(1);
  }, 60_000);
});

describe("resolveTarget", () => {
  const me = (): Omit<RuntimeInfo, "listen" | "url" | "data_dir"> => ({
    version: RUNTIME_FILE_VERSION, pid: process.pid, startTicks: readStat(process.pid)!.startTicks, bootId: bootId(),
    config: null, program: "test", started_at: "2026-01-01T00:00:00Z",
  });
  const write = (d: string, info: RuntimeInfo) => {
    mkdirSync(join(d, "run"), { recursive: true });
    writeFileSync(runtimeFilePath(d), JSON.stringify(info));
  };

  test("a live runtime file gives its address (wildcard listen dialled on loopback); a stale one is ignored; several live ones are named", async () => {
    const a = join(dir, "a");
    const b = join(dir, "b");
    const stale = join(dir, "stale");
    write(a, { ...me(), listen: "0.0.0.0:0", url: "http://0.0.0.0:41234", data_dir: a });
    write(stale, { ...me(), pid: 999_999_999, listen: "127.0.0.1:9", url: "http://127.0.0.1:9", data_dir: stale });
    const t = await resolveTarget({}, {}, () => [a, stale, join(dir, "none")]);
    expect(t.url).toBe("http://127.0.0.1:41234");
    expect(t.source).toContain(`runtime file of pid ${process.pid} in ${a}`);
    expect((await resolveTarget({}, {}, () => [stale])).url).toBe("http://127.0.0.1:8000");
    expect((await resolveTarget({ url: "http://h:1" }, {}, () => [a])).url).toBe("http://h:1"); // --url wins
    write(b, { ...me(), listen: "127.0.0.1:8001", url: "http://127.0.0.1:8001", data_dir: b });
    await expect(resolveTarget({}, {}, () => [a, b])).rejects.toThrow(/several herds are running; pass --url or --config[\s\S]*listening on http:\/\/0\.0\.0\.0:41234[\s\S]*listening on http:\/\/127\.0\.0\.1:8001/);
  });
});

describe("default data dir", () => {
  const facts = (over: Partial<Parameters<typeof chooseDataDir>[0]>) => ({
    uid: 0, env: {}, home: "/root", cwd: "/src/herd", canWrite: () => true, ...over,
  });
  test("root from a source checkout: not the installed service's /var/lib/herd; the binary as root: /var/lib/herd", () => {
    expect(chooseDataDir(facts({ sourceCheckout: true }))).toBe("/root/.local/share/herd");
    expect(chooseDataDir(facts({ sourceCheckout: true, env: { XDG_DATA_HOME: "/x" } }))).toBe("/x/herd");
    expect(chooseDataDir(facts({ sourceCheckout: false }))).toBe("/var/lib/herd");
    // systemd's StateDirectory= still wins: a unit running a checkout asked for it explicitly.
    expect(chooseDataDir(facts({ sourceCheckout: true, env: { STATE_DIRECTORY: "/var/lib/herd" } }))).toBe("/var/lib/herd");
  });
  test("this test runs from a checkout, which herd recognises", () => {
    expect(sourceCheckoutRoot()).toBe(join(import.meta.dir, "../.."));
  });
});
