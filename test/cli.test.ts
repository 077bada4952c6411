// The `herd` command line: exit codes (0 ok, 1 failure, 2 usage), help on every command, config
// check output, and that `run`/`sim-engine` hand the right things to the daemon and the sim engine.
// Most cases call main() in-process; a few spawn `bun src/cli.ts` to prove the real process agrees.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type Entrypoints } from "../src/cli.ts";
import type { Config } from "../src/config/types.ts";
import { VERSION, checkoutCommit } from "../src/version.ts";

const root = join(import.meta.dir, "..");
const dir = mkdtempSync(join(tmpdir(), "herd-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const good = file("good.yaml", "frontend:\n  listen: 127.0.0.1:8123\nmodels:\n  - name: m\nengines:\n  - kind: sim\n    model: m\n    count: 3\n");
const bad = file("bad.yaml", "frontend:\n  listen: 127.0.0.1:8000\nmodels:\n  - name: m\nengines:\n  - kind: sim\n    model: m\n    gpus: 0,1\n");

interface Run {
  code: number;
  out: string;
  err: string;
  daemonCalls: { config: Config; configPath: string | null }[];
  simCalls: string[][];
}

async function herd(...argv: string[]): Promise<Run> {
  const r: Run = { code: -1, out: "", err: "", daemonCalls: [], simCalls: [] };
  const entry: Entrypoints = {
    runDaemon: async (config, opts) => {
      r.daemonCalls.push({ config, configPath: opts.configPath });
      return 7; // a distinctive code, to see it propagate
    },
    simEngineMain: async (args) => {
      r.simCalls.push(args);
      return 3;
    },
  };
  r.code = await main(argv, { out: (t) => void (r.out += t + "\n"), err: (t) => void (r.err += t + "\n") }, entry);
  return r;
}

describe("usage", () => {
  test("no command: usage on stderr, exit 2", async () => {
    const r = await herd();
    expect(r.code).toBe(2);
    expect(r.out).toBe("");
    expect(r.err).toContain("Usage: herd <command>");
  });

  test.each([["--help"], ["-h"], ["help"]])("herd %s: usage listing every command on stdout, exit 0", async (flag) => {
    const r = await herd(flag);
    expect(r.code).toBe(0);
    for (const c of ["run", "config check", "sim-engine", "version"]) expect(r.out).toContain(`  ${c} `);
  });

  test.each(["run", "config check", "version"])("herd %s --help / -h prints its usage, exit 0", async (name) => {
    for (const h of ["--help", "-h"]) {
      const r = await herd(...name.split(" "), h);
      expect(r.code).toBe(0);
      expect(r.out).toContain(`Usage: herd ${name}`);
      expect(r.err).toBe("");
    }
  });

  test("unknown command: message and usage on stderr, exit 2", async () => {
    const r = await herd("frobnicate");
    expect(r.code).toBe(2);
    expect(r.err).toStartWith('herd: unknown command "frobnicate"');
    expect(r.err).toContain("Usage: herd <command>");
  });

  test("a command group without its subcommand: exit 2 naming the choices", async () => {
    const r = await herd("config");
    expect(r.code).toBe(2);
    expect(r.err).toContain("config needs a subcommand: config check");
  });

  test.each([
    [["run", "--bogus"], "unknown flag --bogus"],
    [["run", "--config"], "flag --config needs a value"],
    [["run", "extra"], 'unexpected argument "extra"'],
    [["run", "--listen", "8000"], "--listen: expected HOST:PORT"],
    [["config", "check"], "missing argument FILE"],
    [["config", "check", "a.yaml", "b.yaml"], 'unexpected argument "b.yaml"'],
    [["version", "--short"], "unknown flag --short"],
  ])("herd %p → exit 2: %s", async (argv, message) => {
    const r = await herd(...argv);
    expect(r.code).toBe(2);
    expect(r.err).toContain(message);
    expect(r.err).toContain(`Usage: herd ${argv[0] === "config" ? "config check" : argv[0]}`);
    expect(r.daemonCalls).toEqual([]);
  });
});

describe("herd version", () => {
  test("from a checkout: the package version and git's commit of the checkout", async () => {
    const r = await herd("version");
    expect(r.code).toBe(0);
    const git = Bun.spawnSync(["git", "rev-parse", "--short=12", "HEAD"], { cwd: root, stdout: "pipe", stderr: "ignore" });
    if (git.exitCode !== 0) throw new Error("this test runs in a git checkout (CI clones one)");
    const head = git.stdout.toString().trim();
    expect(r.out).toMatch(new RegExp(`^herd ${VERSION.replaceAll(".", "\\.")} \\(commit ${head}(-dirty)?, source checkout \\S+, bun [\\d.]+\\)\\n$`));
    expect((await herd("--version")).out).toBe(r.out);
  });

  test("a checkout whose tracked files differ is -dirty; no git repository gives null (then 'unknown')", () => {
    const repo = mkdtempSync(join(tmpdir(), "herd-ver-"));
    try {
      const g = (...a: string[]) => Bun.spawnSync(["git", "-c", "user.name=t", "-c", "user.email=t@t", ...a], { cwd: repo, stdout: "pipe", stderr: "pipe" });
      expect(checkoutCommit(repo)).toBeNull();
      g("init", "-q");
      writeFileSync(join(repo, "f"), "1");
      g("add", "f");
      g("commit", "-qm", "x");
      const head = g("rev-parse", "--short=12", "HEAD").stdout.toString().trim();
      expect(checkoutCommit(repo)).toBe(head);
      writeFileSync(join(repo, "f"), "2");
      expect(checkoutCommit(repo)).toBe(`${head}-dirty`);
    } finally {
      rmSync(repo, { recursive: true, force: true });
    }
  });
});

describe("one help layout for every command", () => {
  // Every command `herd --help` lists, pass-through ones included (their own parsers print it).
  const names = ["run", "config check", "doctor", "status", "drain", "undrain", "logs", "sim-engine", "bench", "bench compare", "simulate", "version"];
  test.each(names)("herd %s --help: title line, Usage:, Options:", async (name) => {
    const p = Bun.spawnSync([process.execPath, join(root, "src", "cli.ts"), ...name.split(" "), "--help"], { cwd: root, stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(0);
    const lines = p.stdout.toString().split("\n");
    expect(lines[0]).toMatch(new RegExp(`^herd ${name}: \\S`));
    expect(lines[1]).toBe("");
    expect(lines[2]).toStartWith(`Usage: herd ${name}`);
    const options = lines.indexOf("Options:");
    expect(options).toBeGreaterThan(2);
    expect(lines.slice(options + 1).some((l) => /^\s+-/.test(l))).toBe(true); // at least one option line follows
  });
  test("the usage listing names every command whose help was checked", async () => {
    const r = await herd("--help");
    for (const n of names.filter((n) => n !== "bench compare")) expect(r.out).toContain(`  ${n} `);
  });
});

describe("herd config check", () => {
  test("a valid file: resolved YAML on stdout, exit 0", async () => {
    const r = await herd("config", "check", good);
    expect(r.code).toBe(0);
    expect(r.out).toContain("listen: 127.0.0.1:8123");
    expect(r.out).toContain("count: 3");
    expect(r.out).toContain("startup_timeout_ms: 600000"); // defaults filled in
    expect(r.err).toBe("");
  });

  test("a bad file: path + line findings on stderr, exit 1", async () => {
    const r = await herd("config", "check", bad);
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err).toContain(`engines[0].gpus: expected a list of integers, got "0,1" at ${bad}:8`);
    expect(r.err).toContain(`herd: 1 config error in ${bad}`);
  });

  test("a missing file: exit 1", async () => {
    const r = await herd("config", "check", join(dir, "nope.yaml"));
    expect(r.code).toBe(1);
    expect(r.err).toContain("nope.yaml: cannot read config file: no such file");
  });

  test("warnings go to stderr but the file is valid", async () => {
    const warn = file("warn.yaml", "models:\n  - name: m\n");
    const r = await herd("config", "check", warn);
    expect(r.code).toBe(0);
    expect(r.err).toContain(`warning: engines: no engines configured`);
    expect(r.out).toContain("engines: []");
  });
});

describe("herd run", () => {
  test("no --config: the embedded default goes to the daemon, whose exit code is herd's", async () => {
    const r = await herd("run");
    expect(r.code).toBe(7);
    expect(r.daemonCalls).toHaveLength(1);
    const { config, configPath } = r.daemonCalls[0]!;
    expect(configPath).toBeNull();
    expect(config.frontend.listen).toBe("127.0.0.1:8000");
    expect(config.engines[0]).toMatchObject({ kind: "sim", count: 2 });
  });

  test("--config FILE and --listen (both flag forms)", async () => {
    for (const argv of [["--config", good, "--listen", "127.0.0.1:0"], [`--config=${good}`, "--listen=127.0.0.1:0"]]) {
      const r = await herd("run", ...argv);
      expect(r.code).toBe(7);
      const { config, configPath } = r.daemonCalls[0]!;
      expect(configPath).toBe(good);
      expect(config.frontend.listen).toBe("127.0.0.1:0");
      expect(config.engines[0]!.count).toBe(3);
    }
  });

  test("a bad config: findings on stderr, exit 1, the daemon never starts", async () => {
    const r = await herd("run", "--config", bad);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`engines[0].gpus: expected a list of integers`);
    expect(r.daemonCalls).toEqual([]);
  });

  test("a daemon that throws: message on stderr, exit 1", async () => {
    const entry: Entrypoints = {
      runDaemon: async () => {
        throw new Error("listen EADDRINUSE 127.0.0.1:8000");
      },
      simEngineMain: async () => 0,
    };
    let err = "";
    const code = await main(["run"], { out: () => {}, err: (t) => void (err += t) }, entry);
    expect(code).toBe(1);
    expect(err).toBe("herd run: listen EADDRINUSE 127.0.0.1:8000");
  });
});

describe("herd sim-engine", () => {
  test("every argument, --help included, goes to the sim engine untouched", async () => {
    const r = await herd("sim-engine", "--port", "0", "--model", "m", "--help", "--time-scale=20");
    expect(r.code).toBe(3);
    expect(r.simCalls).toEqual([["--port", "0", "--model", "m", "--help", "--time-scale=20"]]);
  });
});

describe("as a real process (bun src/cli.ts)", () => {
  const spawn = (...argv: string[]) => {
    const p = Bun.spawnSync([process.execPath, join(root, "src", "cli.ts"), ...argv], { cwd: root, stdout: "pipe", stderr: "pipe" });
    return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
  };

  test("config check on a good file: exit 0 and the whole resolved config on stdout", () => {
    const r = spawn("config", "check", good);
    expect(r.code).toBe(0);
    expect(r.out).toContain("listen: 127.0.0.1:8123");
    expect(r.out.trimEnd()).toEndWith("  buffer_bytes: 65536"); // nothing lost to process.exit (the decision_log section is last)
  });

  test("config check on a bad file: exit 1, findings on stderr", () => {
    const r = spawn("config", "check", bad);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`engines[0].gpus: expected a list of integers, got "0,1" at ${bad}:8`);
  });

  test("unknown flag: exit 2; --help: exit 0; version: exit 0", () => {
    expect(spawn("run", "--nope").code).toBe(2);
    const help = spawn("run", "--help");
    expect(help.code).toBe(0);
    expect(help.out).toContain("--listen HOST:PORT");
    expect(spawn("version").out).toStartWith(`herd ${VERSION} `);
  });
});
