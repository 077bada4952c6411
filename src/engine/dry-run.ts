// `herd run --dry-run`: what herd would start, without starting anything — per engine the exact
// environment it adds and the argv, the port plan and the GPU assignment. Pure rendering of plans.
// Secrets (engine env such as HF_TOKEN, `--api-key` values, config tokens) print as <redacted>.
import { redact, redactArgv, redactEnv, secretValues } from "../config/redact.ts";
import type { Config } from "../config/types.ts";
import type { HostGpus } from "./gpus.ts";
import type { EnginePlan } from "./types.ts";

/** POSIX shell quoting, so a printed line can be pasted into a shell as is. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'"'"'`)}'`;
}

const portOf = (endpoint: string) => /:(\d+)$/.exec(endpoint)?.[1] ?? "?";

export function renderDryRun(config: Config, plans: readonly EnginePlan[], host: HostGpus): string {
  const lines: string[] = [];
  const gpuLine = host.ids.length ? `GPUs ${host.ids.join(",")} (from ${host.source})` : `no GPU found (${host.source})`;
  lines.push(`# herd run --dry-run: node ${config.node.name}, listen ${config.frontend.listen}, ${plans.length} engine${plans.length === 1 ? "" : "s"}; host: ${gpuLine}`);
  lines.push("# Each engine inherits herd's own environment plus the variables shown.");
  for (const p of plans) {
    lines.push("");
    lines.push(`## ${p.id} (${p.kind}, model ${p.model}, role ${p.role})`);
    if (!p.spec) {
      lines.push(`url:   ${p.url}  (external: not started by herd)`);
      if (p.kvEvents) lines.push(`kv:    events ${p.kvEvents.endpoint}${p.kvEvents.replayEndpoint ? `, replay ${p.kvEvents.replayEndpoint}` : ""}`);
      continue;
    }
    const s = p.spec;
    const ports = [`http ${s.port}`];
    if (s.kvEvents) ports.push(`kv-events ${portOf(s.kvEvents.endpoint)}`, ...(s.kvEvents.replayEndpoint ? [`kv-replay ${portOf(s.kvEvents.replayEndpoint)}`] : []));
    lines.push(`url:   ${s.url}  health ${s.healthPath}`);
    lines.push(`ports: ${ports.join(", ")}`);
    lines.push(`gpus:  ${s.gpus.length ? s.gpus.join(",") : "none"}`);
    lines.push("env:");
    for (const [k, v] of Object.entries(redactEnv(s.env)).sort(([a], [b]) => (a < b ? -1 : 1))) {
      // The sim's watchdog names the herd that runs it: this dry run's pid would mislead.
      const shown = k === "HERD_SUPERVISOR_PID" && v === String(process.pid) ? "<pid of herd run>" : shellQuote(v);
      lines.push(`  ${k}=${shown}`);
    }
    lines.push("argv:");
    lines.push(`  ${redactArgv(s.argv).map(shellQuote).join(" ")}`);
  }
  // secrets by name are replaced above; any config secret still present (a JSON blob in argv) here
  return redact(lines.join("\n"), secretValues(config));
}
