// config/observability/: the Grafana dashboards and the Prometheus rules query only metrics a live
// `herd run` exports (a metric renamed in code fails here), the dashboards are what
// scripts/gen-dashboards.ts writes, `promtool check rules` passes and `promtool test rules` runs
// one case per alert.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { parse } from "yaml";
import { OBSERVABILITY_DIR, renderDashboards } from "../../scripts/gen-dashboards.ts";
import { peer } from "../helpers/peers.ts";
import { startLiveHerd, type LiveHerd } from "./live-herd.ts";

const RULES = join(OBSERVABILITY_DIR, "prometheus-rules.yml");
const RULE_TESTS = join(OBSERVABILITY_DIR, "prometheus-rules.test.yml");
const hasPromtool = () => peer("promtool", ["promtool", "--version"]);

interface RuleFile {
  groups: { name: string; rules: { record?: string; alert?: string; expr: string }[] }[];
}
const rules = (): RuleFile => parse(readFileSync(RULES, "utf8")) as RuleFile;

/** Every query of the dashboards and the rules, with where it comes from. */
function queries(): { where: string; expr: string }[] {
  const out: { where: string; expr: string }[] = [];
  for (const [file] of renderDashboards()) {
    const d = JSON.parse(readFileSync(join(OBSERVABILITY_DIR, file), "utf8")) as { panels: { title: string; targets: { expr: string }[] }[]; templating: { list: { name: string; query?: unknown }[] } };
    for (const p of d.panels) for (const t of p.targets) out.push({ where: `${file}: ${p.title}`, expr: t.expr });
    for (const v of d.templating.list) if (typeof v.query === "object" && v.query !== null) out.push({ where: `${file}: variable ${v.name}`, expr: String((v.query as { query: string }).query) });
  }
  for (const g of rules().groups) for (const r of g.rules) out.push({ where: `prometheus-rules.yml: ${r.record ?? r.alert}`, expr: r.expr });
  return out;
}

/** herd_* names an expression reads (series names: a histogram's _bucket/_sum/_count included). */
export function metricNames(expr: string): string[] {
  return [...new Set(expr.match(/\bherd_[a-z0-9_]+\b/g) ?? [])];
}

/** The metric families a /metrics text declares (`# TYPE name kind`), with their kinds. */
export function families(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, m[2]!);
  return out;
}

/** Names in `names` that `text` does not export (a histogram's series names count as exported). */
export function missing(names: Iterable<string>, text: string): string[] {
  const fam = families(text);
  const exported = (n: string) => {
    if (fam.has(n)) return true;
    const base = n.replace(/_(bucket|sum|count)$/, "");
    return base !== n && (fam.get(base) === "histogram" || fam.get(base) === "summary");
  };
  return [...names].filter((n) => !exported(n));
}

describe("dashboards and rules", () => {
  let live: LiveHerd | null = null;
  beforeAll(async () => {
    live = await startLiveHerd("herd-obs");
  }, 60_000);
  afterAll(async () => {
    await live?.stop();
  });

  test("the committed dashboards are what scripts/gen-dashboards.ts writes", () => {
    for (const [file, text] of renderDashboards()) expect({ file, text: readFileSync(join(OBSERVABILITY_DIR, file), "utf8") }).toEqual({ file, text });
    expect([...renderDashboards().keys()].sort()).toEqual(
      ["grafana-cluster.json", "grafana-overview.json", "grafana-pd.json", "grafana-planner.json", "grafana-routing-kv.json", "grafana-tier.json"],
    );
  });

  test("every metric a dashboard or rule reads exists in a live herd's /metrics", async () => {
    const text = await (await fetch(`${live!.herd.url}/metrics`)).text();
    const qs = queries();
    expect(qs.length).toBeGreaterThan(50);
    const unknown = qs.flatMap((q) => missing(metricNames(q.expr), text).map((n) => `${q.where}: ${n}`));
    expect(unknown).toEqual([]);
    // The check itself: a renamed metric is caught, a histogram's series are accepted.
    expect(missing(["herd_time_to_first_token_seconds_bucket", "herd_requests_total"], text)).toEqual([]);
    expect(missing(["herd_time_to_first_token_second_bucket", "herd_request_total"], text)).toEqual(["herd_time_to_first_token_second_bucket", "herd_request_total"]);
  }, 30_000);

  test("every recorded series a dashboard or alert reads is recorded by the rules", () => {
    const recorded = new Set(rules().groups.flatMap((g) => g.rules.map((r) => r.record).filter((r): r is string => !!r)));
    const used = queries().flatMap((q) => (q.expr.match(/\bherd:[a-z0-9_:]+/g) ?? []).map((n) => ({ where: q.where, n })));
    expect(used.length).toBeGreaterThan(10);
    expect(used.filter((u) => !recorded.has(u.n))).toEqual([]);
  });

  test("each alert has a promtool unit test case", () => {
    const alerts = rules().groups.flatMap((g) => g.rules.map((r) => r.alert).filter((a): a is string => !!a));
    expect(alerts.sort()).toEqual(["HerdEngineCrashLoop", "HerdKvEventGaps", "HerdKvTierCorruptReads", "HerdLeaderFlapping", "HerdNoReadyWorker", "HerdPrefixHitRateCollapse", "HerdTlsCertExpiringSoon", "HerdTtftP95OverSlo"]);
    const cases = parse(readFileSync(RULE_TESTS, "utf8")) as { tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[] };
    const firing = new Set(cases.tests.flatMap((t) => t.alert_rule_test.filter((a) => a.exp_alerts.length > 0).map((a) => a.alertname)));
    const quiet = new Set(cases.tests.flatMap((t) => t.alert_rule_test.filter((a) => a.exp_alerts.length === 0).map((a) => a.alertname)));
    for (const a of alerts) {
      expect({ a, fires: firing.has(a) }).toEqual({ a, fires: true });
      expect({ a, quiet: quiet.has(a) }).toEqual({ a, quiet: true });
    }
  });

  test.skipIf(!hasPromtool())("promtool check rules passes", () => {
    const r = spawnSync("promtool", ["check", "rules", RULES], { encoding: "utf8" });
    expect({ status: r.status, out: r.stdout + r.stderr }).toMatchObject({ status: 0 });
    expect(r.stdout).toContain("SUCCESS");
  });

  test.skipIf(!hasPromtool())("promtool test rules: every alert fires on its input series and stays quiet before", () => {
    const r = spawnSync("promtool", ["test", "rules", RULE_TESTS], { encoding: "utf8", cwd: OBSERVABILITY_DIR });
    expect({ status: r.status, out: r.stdout + r.stderr }).toMatchObject({ status: 0 });
    // promtool evaluates every alert's series: 4.7-6.4 s on a loaded 2-core box, past bun's 5 s default.
  }, 60_000);
});
