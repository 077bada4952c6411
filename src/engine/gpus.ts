// The host's GPUs, and which engine gets which. Detection is an injected probe (tests and
// `--dry-run` on a laptop pass their own); assignment and the over-subscription rules are pure.
// Without `gpus` every engine would start with no CUDA_VISIBLE_DEVICES and land on GPU 0.
import { readdirSync } from "node:fs";
import type { Config } from "../config/types.ts";
import { driverFor } from "./drivers/registry.ts";

export interface HostGpus {
  /** CUDA device ids present (0…n-1 in nvidia-smi's PCI bus order). */
  ids: number[];
  /** Where the list came from; "none" when neither nvidia-smi nor the driver's procfs answered. */
  source: "nvidia-smi" | "procfs" | "none" | "given";
}

/** `nvidia-smi -L` lines: `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)`. */
export function parseNvidiaSmiList(text: string): number[] {
  const ids: number[] = [];
  for (const m of text.matchAll(/^GPU (\d+):/gm)) ids.push(Number(m[1]));
  return ids;
}

export interface GpuProbe {
  /** stdout of `nvidia-smi -L`, or null when it cannot run. */
  nvidiaSmi(): string | null;
  /** Entries of /proc/driver/nvidia/gpus (one per GPU, named by PCI address), or null. */
  procGpus(): string[] | null;
}

export const systemGpuProbe: GpuProbe = {
  nvidiaSmi() {
    try {
      const r = Bun.spawnSync(["nvidia-smi", "-L"], { stdout: "pipe", stderr: "ignore", stdin: "ignore" });
      return r.exitCode === 0 ? r.stdout.toString() : null;
    } catch {
      return null; // not installed
    }
  },
  procGpus() {
    try {
      return readdirSync("/proc/driver/nvidia/gpus");
    } catch {
      return null;
    }
  },
};

export function detectGpus(probe: GpuProbe = systemGpuProbe): HostGpus {
  const smi = probe.nvidiaSmi();
  if (smi !== null) return { ids: parseNvidiaSmiList(smi), source: "nvidia-smi" };
  const dirs = probe.procGpus();
  // PCI addresses sort in bus order, the order nvidia-smi numbers them in.
  if (dirs !== null && dirs.length > 0) return { ids: dirs.map((_, i) => i), source: "procfs" };
  return { ids: [], source: "none" };
}

export interface GpuIssue {
  severity: "error" | "warning";
  path: string;
  message: string;
}

export interface GpuPlan {
  /** Per engines[] entry, per engine index: its GPU ids (empty: none). */
  byEntry: number[][][];
  issues: GpuIssue[];
}

const fmt = (ids: readonly number[]) => (ids.length ? ids.join(",") : "none");

/**
 * Split explicit `gpus` evenly across `count`; give every GPU engine without `gpus` one GPU of the
 * host that no entry names, in order. A GPU used by two engines is an error unless every entry
 * involved sets `share_gpu` (then a warning). Named GPUs the host lacks: an error when the host has
 * GPUs, a warning when it has none (a dry run on a laptop).
 */
export function assignGpus(config: Config, host: HostGpus): GpuPlan {
  const issues: GpuIssue[] = [];
  const named = new Set(config.engines.flatMap((e) => e.gpus));
  const free = host.ids.filter((g) => !named.has(g));
  const users = new Map<number, { entry: number; share: boolean }[]>();
  const hostSet = new Set(host.ids);
  const missing: string[] = [];
  const byEntry = config.engines.map((e, i) => {
    const path = `engines[${i}].gpus`;
    const driver = driverFor(e.kind);
    if (!driver.managed) return [];
    let shares: number[][];
    if (e.gpus.length > 0) {
      if (e.gpus.length % e.count !== 0) return Array.from({ length: e.count }, () => []); // validate.ts reports it
      const per = e.gpus.length / e.count;
      shares = Array.from({ length: e.count }, (_, k) => e.gpus.slice(k * per, (k + 1) * per));
      const absent = e.gpus.filter((g) => !hostSet.has(g));
      if (absent.length) missing.push(`${path}: ${fmt(absent)}`);
    } else if (driver.usesGpus && host.ids.length > 0) {
      shares = [];
      for (let k = 0; k < e.count; k++) {
        const g = free.shift() ?? (e.share_gpu ? host.ids[k % host.ids.length] : undefined);
        if (g === undefined) {
          issues.push({ severity: "error", path, message: `no GPU left for engine ${k} of ${e.count} (host GPUs ${fmt(host.ids)}, named by entries ${fmt([...named])}); list gpus, lower count, or set share_gpu: true` });
          shares.push([]);
        } else shares.push([g]);
      }
    } else {
      shares = Array.from({ length: e.count }, () => []);
      if (driver.usesGpus) issues.push({ severity: "warning", path, message: `no GPU detected on this host (${host.source}); ${e.kind} engines start without CUDA_VISIBLE_DEVICES` });
    }
    for (const s of shares) for (const g of new Set(s)) users.set(g, [...(users.get(g) ?? []), { entry: i, share: e.share_gpu }]);
    return shares;
  });
  if (missing.length) {
    const sev = host.ids.length > 0 ? "error" : "warning";
    const have = host.ids.length > 0 ? `this host has GPUs ${fmt(host.ids)}` : `no GPU found on this host (${host.source})`;
    for (const m of missing) {
      const [path, ids] = m.split(": ");
      const what = ids!.includes(",") ? `GPUs ${ids} are` : `GPU ${ids} is`;
      issues.push({ severity: sev, path: path!, message: `${what} not present: ${have}` });
    }
  }
  for (const [g, us] of [...users].sort((a, b) => a[0] - b[0])) {
    if (us.length < 2) continue;
    const who = us.map((u) => `engines[${u.entry}]`);
    const everyoneAgreed = us.every((u) => u.share);
    issues.push({
      severity: everyoneAgreed ? "warning" : "error",
      path: `engines[${us[us.length - 1]!.entry}].gpus`,
      message: everyoneAgreed
        ? `GPU ${g} is shared by ${us.length} engines (${[...new Set(who)].join(", ")}); they split its memory`
        : `GPU ${g} would run ${us.length} engines (${[...new Set(who)].join(", ")}); each engine sizes its KV cache for the whole GPU, so they run out of memory. Give each its own GPU, or set share_gpu: true on every entry involved`,
    });
  }
  return { byEntry, issues };
}
