#!/usr/bin/env bun
// The `herd` command line: argv → one entry of COMMANDS. This is the only file that calls
// process.exit. Exit codes: 0 success, 1 failure (bad config, daemon error), 2 usage error.
// A later command (status, drain, logs, bench, …) is one more entry in COMMANDS.

import { checkListen } from "./config/checks.ts";
import { renderFindings, type Finding } from "./config/findings.ts";
import { secretFileFindings } from "./config/secret-perms.ts";
import { REDACTED, redact, redactConfig, secretValues } from "./config/redact.ts";
import { applyOverrides, configToYaml, defaultConfig, loadConfigFile, type ConfigResult } from "./config/load.ts";
import type { Config } from "./config/types.ts";
import { errorMessage } from "./core/errors.ts";
import { versionLine } from "./version.ts";

export interface Io {
  out(text: string): void;
  err(text: string): void;
}

const stdio: Io = {
  out: (t) => void process.stdout.write(t.endsWith("\n") ? t : t + "\n"),
  err: (t) => void process.stderr.write(t.endsWith("\n") ? t : t + "\n"),
};

interface Parsed {
  flags: Record<string, string>;
  positionals: string[];
}

interface Command {
  /** Words after `herd`, e.g. "config check". */
  name: string;
  summary: string;
  /** Arguments after the name, for the usage line, e.g. "[--config FILE] [--listen HOST:PORT]". */
  args: string;
  /** Extra help text: flags and details. */
  help: string;
  /** Flags taking a value (`--name VALUE` or `--name=VALUE`). */
  valueFlags?: readonly string[];
  /** Flags without a value (`--name`); parsed as "true". */
  boolFlags?: readonly string[];
  positionals?: { min: number; max: number };
  /** Hand argv untouched to the command, which does its own parsing and --help. */
  passThrough?: boolean;
  run(args: Parsed, io: Io, ctx: { rawArgs: string[]; entry: Entrypoints }): Promise<number>;
}

class UsageError extends Error {}

/** Lazy loaders for the heavy entry points (so `herd version` does not load the daemon); tests swap them. */
export interface Entrypoints {
  runDaemon(config: Config, opts: { configPath: string | null; overrides?: { listen?: string } }): Promise<number>;
  simEngineMain(argv: string[]): Promise<number>;
  /** Engine checks against this host (GPUs) and the --dry-run text; default: engine/preflight.ts. */
  preflight?(config: Config, lineOf?: (path: string) => number): Promise<import("./engine/preflight.ts").Preflight>;
}

const realPreflight = async (config: Config, lineOf?: (path: string) => number) => {
  const { applyPdLaunch } = await import("./pd/launch.ts");
  // The metadata service's port is only known once herd runs (it binds port 0).
  const nixl = () => `${config.node.advertise}:<port bound at start>`;
  const { applyTierLaunch, tierPassword } = await import("./tier/launch.ts");
  return (await import("./engine/preflight.ts")).preflight(config, lineOf, undefined, (plans) => [
    ...applyPdLaunch(config, plans, { nixlEndpoint: nixl }),
    ...applyTierLaunch(config, plans, () => tierPassword(config, true)),
  ]);
};

/** The config result with the engine checks added (a config with an engine error is unusable). */
async function withEngineChecks(result: ConfigResult, entry: Entrypoints, configFile: string | null) {
  if (!result.config) return { result, pre: null };
  const pre = await (entry.preflight ?? realPreflight)(result.config, result.lineOf);
  // secret files open to other users (issue 22, row 13): warnings in `config check` and before `run` starts
  const perms = secretFileFindings(result.config, configFile, result.lineOf);
  const findings = [...result.findings, ...pre.findings, ...perms];
  const bad = pre.findings.some((f) => f.severity === "error");
  const { config: _dropped, ...rest } = result;
  return { result: bad ? { ...rest, findings } : { ...result, findings }, pre };
}

const realEntrypoints: Entrypoints = {
  runDaemon: async (config, opts) => (await import("./daemon/daemon.ts")).runDaemon(config, opts),
  simEngineMain: async (argv) => (await import("./engine/sim/main.ts")).simEngineMain(argv),
};

const COMMANDS: readonly Command[] = [
  {
    name: "run",
    summary: "start the daemon: engines, router and the OpenAI-compatible frontend",
    args: "[--config FILE] [--listen HOST:PORT] [--dry-run]",
    help: [
      "Options:",
      "  --config FILE        YAML config (default: the embedded default, two simulated engines)",
      "  --listen HOST:PORT   override frontend.listen",
      "  --dry-run            print each engine's environment, argv, ports and GPUs, then exit",
      "  -h, --help           this help",
    ].join("\n"),
    valueFlags: ["config", "listen"],
    boolFlags: ["dry-run"],
    async run({ flags }, io, { entry }) {
      const listen = flags.listen;
      if (listen !== undefined) {
        const bad = checkListen(listen);
        if (bad) throw new UsageError(`--listen: ${bad}`);
      }
      const configPath = flags.config ?? null;
      let result: ConfigResult = configPath === null ? { config: defaultConfig(), findings: [] } : await loadConfigFile(configPath);
      if (!report(result, io)) return 1;
      if (listen !== undefined && result.config) {
        result = applyOverrides(result.config, { listen });
        if (!report(result, io)) return 1;
      }
      const checked = await withEngineChecks(result, entry, configPath);
      if (!report({ ...checked.result, findings: checked.result.findings.slice(result.findings.length) }, io)) return 1;
      const config = checked.result.config;
      if (!config) return 1;
      if (flags["dry-run"] !== undefined) {
        io.out(checked.pre!.dryRun());
        return 0;
      }
      return await entry.runDaemon(config, { configPath, overrides: listen !== undefined ? { listen } : {} });
    },
  },
  {
    name: "config check",
    summary: "validate a config file and print it with every default filled in",
    args: "FILE",
    help: "Prints the resolved config as YAML (exit 0), or one line per problem as\n`path: message at FILE:LINE` on stderr (exit 1). Warnings go to stderr either way.\n\nOptions:\n  -h, --help           this help",
    positionals: { min: 1, max: 1 },
    async run({ positionals }, io, { entry }) {
      const file = positionals[0] ?? "";
      const loaded = await loadConfigFile(file);
      const result = (await withEngineChecks(loaded, entry, file)).result;
      if (!report(result, io)) return 1;
      if (!result.config) return 1;
      const yaml = configToYaml(redactConfig(result.config));
      io.out(redact(`# ${file}: valid; resolved with defaults (secrets shown as ${REDACTED})\n${yaml}`, secretValues(result.config)));
      return 0;
    },
  },
  ...(["status", "drain", "undrain", "logs", "top"] as const).map(
    (name): Command => ({
      name,
      summary: {
        status: "this node's workers: state, role, load, restarts, KV events (--json for scripts)",
        drain: "take a worker (or --node: all) out of rotation; in-flight requests finish",
        undrain: "put a drained worker (or --node: all) back into rotation",
        logs: "the tail of a worker's engine output",
        top: "a live view of the workers and request rates (q to quit)",
      }[name],
      args: { status: "[--json]", drain: "WORKER | --node", undrain: "WORKER | --node", logs: "WORKER [-n N]", top: "[--interval-ms N]" }[name],
      help: `Run \`herd ${name} --help\` for its options (--url, --config, --token).`,
      passThrough: true,
      async run(_parsed, io, { rawArgs }) {
        return await (await import("./ops/commands.ts")).opsMain(name, rawArgs, io);
      },
    }),
  ),
  {
    name: "planner status",
    summary: "the planner: desired vs actual engines per pool, last reasons, held requests (--json)",
    args: "[--json]",
    help: "Run `herd planner status --help` for its options (--url, --config, --token).",
    passThrough: true,
    async run(_parsed, io, { rawArgs }) {
      return await (await import("./ops/commands.ts")).opsMain("planner status", rawArgs, io);
    },
  },
  {
    name: "doctor",
    summary: "check this host before starting herd: config, GPUs, engines, ports, KV tier, secrets, cluster",
    args: "[FILE | --config FILE] [--json]",
    help: "Run `herd doctor --help` for its options (--config, --json).",
    passThrough: true,
    async run(_parsed, io, { rawArgs }) {
      return await (await import("./ops/doctor.ts")).doctorMain(rawArgs, io);
    },
  },
  {
    name: "sim-engine",
    summary: "run a simulated engine that speaks vLLM's OpenAI API (no GPU)",
    args: "[options]",
    help: "Run `herd sim-engine --help` for its options (--port, --model, --time-scale, --kv-blocks, …).",
    passThrough: true,
    async run(_parsed, _io, { rawArgs, entry }) {
      return await entry.simEngineMain(rawArgs);
    },
  },
  {
    name: "bench",
    summary: "load-test an OpenAI-compatible endpoint: latency percentiles, throughput, goodput",
    args: "[options] | compare A.json B.json",
    help: "Run `herd bench --help` for its options (--url, --workload, --rate, --slo, --json, --svg, …).",
    passThrough: true,
    async run(_parsed, _io, { rawArgs }) {
      return await (await import("./bench/cli.ts")).benchMain(rawArgs);
    },
  },
  {
    name: "simulate",
    summary: "what-if in virtual time: policies × replica counts on simulated engines, or --calibrate bench.json",
    args: "[options] | --calibrate bench.json",
    help: "Run `herd simulate --help` for its options (--workload, --rate, --replicas, --policy, --slo, --json, …).",
    passThrough: true,
    async run(_parsed, _io, { rawArgs }) {
      return await (await import("./simulate/cli.ts")).simulateMain(rawArgs);
    },
  },
  {
    name: "version",
    summary: "print the version and the commit it was built from",
    args: "",
    help: "From a source checkout the commit is git's (`git rev-parse --short=12 HEAD`, -dirty when\ntracked files differ), as scripts/build.sh embeds it in a binary.\n\nOptions:\n  -h, --help           this help",
    async run(_parsed, io) {
      io.out(versionLine());
      return 0;
    },
  },
];

/** Print findings; true when there is a usable config (warnings alone do not stop anything). */
function report(result: ConfigResult, io: Io): boolean {
  const findings: Finding[] = result.findings;
  if (findings.length) io.err(redact(renderFindings(findings, result.file ?? null), result.config ? secretValues(result.config) : []));
  const errors = findings.filter((f) => f.severity === "error").length;
  if (!result.config && errors) io.err(`herd: ${errors} config error${errors === 1 ? "" : "s"}${result.file ? ` in ${result.file}` : ""}`);
  return result.config !== undefined;
}

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    "herd: one OpenAI-compatible service from the LLM engines on this host",
    "",
    "Usage: herd <command> [options]",
    "",
    "Commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    "",
    "Run `herd <command> --help` for a command's options.",
  ].join("\n");
}

/** Every command's help has one layout: "herd NAME: title", "Usage: …", text, "Options: …". */
function commandHelp(c: Command): string {
  const line = `Usage: herd ${c.name}${c.args ? ` ${c.args}` : ""}`;
  return [`herd ${c.name}: ${c.summary}`, "", line, ...(c.help ? ["", c.help] : [])].join("\n");
}

function parseArgs(c: Command, argv: readonly string[]): Parsed | "help" {
  const flags: Record<string, string> = {};
  const positionals: string[] = [];
  const valueFlags = c.valueFlags ?? [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? "";
    if (a === "--help" || a === "-h") return "help";
    if (a === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (a.startsWith("-") && a !== "-") {
      const m = /^--([A-Za-z0-9-]+)(?:=(.*))?$/s.exec(a);
      const name = m?.[1];
      if (m && name !== undefined && (c.boolFlags ?? []).includes(name) && m[2] === undefined) {
        flags[name] = "true";
        continue;
      }
      if (!m || name === undefined || !valueFlags.includes(name)) throw new UsageError(`unknown flag ${a}`);
      const value = m[2] ?? argv[++i];
      if (value === undefined) throw new UsageError(`flag --${name} needs a value`);
      flags[name] = value;
      continue;
    }
    positionals.push(a);
  }
  const { min, max } = c.positionals ?? { min: 0, max: 0 };
  if (positionals.length < min) throw new UsageError(`missing argument ${c.args.split(" ")[positionals.length] ?? ""}`.trim());
  if (positionals.length > max) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[max])}`);
  return { flags, positionals };
}

/** Longest command whose words prefix argv. */
function findCommand(argv: readonly string[]): { command: Command; rest: string[] } | null {
  let best: { command: Command; rest: string[] } | null = null;
  for (const command of COMMANDS) {
    const words = command.name.split(" ");
    if (words.every((w, i) => argv[i] === w) && (!best || words.length > best.command.name.split(" ").length))
      best = { command, rest: argv.slice(words.length) };
  }
  return best;
}

/** Run `herd ARGV…` and return the exit code. */
export async function main(argv: readonly string[], io: Io = stdio, entry: Entrypoints = realEntrypoints): Promise<number> {
  const first = argv[0];
  if (first === undefined) {
    io.err(usage());
    return 2;
  }
  if (first === "--help" || first === "-h" || first === "help") {
    io.out(usage());
    return 0;
  }
  if (first === "--version") return main(["version", ...argv.slice(1)], io, entry);
  const found = findCommand(argv);
  if (!found) {
    const group = COMMANDS.filter((c) => c.name.startsWith(`${first} `));
    const known = group.length ? `${first} needs a subcommand: ${group.map((c) => c.name).join(", ")}` : `unknown command ${JSON.stringify(first)}`;
    io.err(`herd: ${known}\n\n${usage()}`);
    return 2;
  }
  const { command, rest } = found;
  try {
    const ctx = { rawArgs: rest, entry };
    if (command.passThrough) return await command.run({ flags: {}, positionals: [] }, io, ctx);
    const parsed = parseArgs(command, rest);
    if (parsed === "help") {
      io.out(commandHelp(command));
      return 0;
    }
    return await command.run(parsed, io, ctx);
  } catch (e) {
    if (e instanceof UsageError) {
      const line = `Usage: herd ${command.name}${command.args ? ` ${command.args}` : ""}`;
      io.err(`herd ${command.name}: ${e.message}\n${line}\nRun \`herd ${command.name} --help\` for details.`);
      return 2;
    }
    io.err(`herd ${command.name}: ${errorMessage(e)}`);
    return 1;
  }
}

if (import.meta.main) {
  process.exit(await main(process.argv.slice(2)));
}
