// `herd doctor`'s cluster checks: every seed (peers) answers the peer API, accepts this node's
// cluster token and publishes the same model cards (block size, tokenizer checksum, hash seed;
// src/cluster/publish.ts says why they must agree); every etcd endpoint answers; and the clock offset
// against each, from the HTTP Date header (whole seconds, so only offsets of seconds are seen).
import type { Config } from "../config/types.ts";
import { parseHostPort } from "../config/checks.ts";
import { loadToken } from "../cluster/auth.ts";
import { PEER_API_PREFIX } from "../cluster/client.ts";
import { modelCards } from "../cluster/node.ts";
import { CARD_FIELDS, decodeAdvert, type ModelCard } from "../cluster/publish.ts";
import type { CheckResult } from "./doctor-checks.ts";
import type { DoctorProbe, HttpAnswer } from "./doctor-probe.ts";

/** Offsets beyond this are a warning: logs and traces across nodes stop lining up. */
export const CLOCK_WARN_MS = 2_000;
const PEER_TIMEOUT_MS = 3_000;

/** Estimated peer clock minus ours: the Date header is truncated to the second, so add half of one. */
export function clockOffsetMs(a: Pick<HttpAnswer, "dateMs" | "sentMs" | "receivedMs">): number | null {
  if (a.dateMs === null) return null;
  return a.dateMs + 500 - (a.sentMs + a.receivedMs) / 2;
}

function offsetResult(check: string, who: string, a: HttpAnswer): CheckResult | null {
  const off = clockOffsetMs(a);
  if (off === null || Math.abs(off) <= CLOCK_WARN_MS) return null;
  return { check, status: "warn", message: `${who}'s clock is ${(off / 1000).toFixed(1)} s ${off > 0 ? "ahead of" : "behind"} this host's`, fix: "run NTP (chrony or systemd-timesyncd) on every node" };
}

/** Cards that differ between this config and a peer's, as `model: field ours≠theirs`. */
export function cardMismatches(ours: readonly ModelCard[], theirs: readonly ModelCard[]): string[] {
  const out: string[] = [];
  for (const o of ours) {
    const t = theirs.find((c) => c.model === o.model);
    if (!t) continue;
    for (const f of CARD_FIELDS) if (o[f] !== t[f]) out.push(`${o.model}: ${f} ${JSON.stringify(o[f])} here, ${JSON.stringify(t[f])} there`);
  }
  return out;
}

export async function checkCluster(config: Config, probe: DoctorProbe): Promise<CheckResult[]> {
  const c = config.cluster;
  if (c.discovery === "file") {
    return [{ check: "cluster", status: "ok", message: c.file.dir === "" ? "one-node cluster (file discovery under node.data_dir)" : `file discovery in ${c.file.dir}` }];
  }
  let token = "";
  try {
    token = loadToken(c);
  } catch (e) {
    return [{ check: "cluster", status: "fail", message: (e as Error).message, fix: "create cluster.token_file with the shared token on its first line" }];
  }
  if (c.discovery === "etcd") return checkEtcd(config, probe);
  const listen = parseHostPort(config.frontend.listen);
  const self = listen ? `${config.node.advertise}:${listen.port}` : "";
  const others = c.peers.seeds.filter((s) => s !== self);
  if (others.length === 0) return [{ check: "cluster", status: "ok", message: `this node (${self}) is the only seed` }];
  const ours = modelCards(config);
  const out: CheckResult[] = [];
  for (const seed of others) out.push(...(await checkSeed(seed, token, ours, probe)));
  return out;
}

async function checkSeed(seed: string, token: string, ours: ModelCard[], probe: DoctorProbe): Promise<CheckResult[]> {
  const check = `cluster ${seed}`;
  let a: HttpAnswer;
  try {
    a = await probe.http(`http://${seed}${PEER_API_PREFIX}/view`, { headers: token ? { authorization: `Bearer ${token}` } : {}, timeoutMs: PEER_TIMEOUT_MS });
  } catch (e) {
    return [{ check, status: "warn", message: `does not answer: ${(e as Error).message}`, fix: `start herd there, or open its port to this host (a node alone serves only its own engines)` }];
  }
  if (a.status === 401) return [{ check, status: "fail", message: `refuses this node's cluster token (HTTP 401)`, fix: "set the same cluster.token (or cluster.token_file content) on every node" }];
  if (a.status !== 200) return [{ check, status: "fail", message: `answers HTTP ${a.status} on ${PEER_API_PREFIX}/view: not a herd peer API`, fix: "check that the seed address is herd's frontend.listen there" }];
  let view: any;
  try {
    view = JSON.parse(a.text);
  } catch {
    return [{ check, status: "fail", message: "answers with something that is not JSON", fix: "check that the seed address is herd's frontend.listen there" }];
  }
  const out: CheckResult[] = [];
  const me = Array.isArray(view?.nodes) ? view.nodes.find((n: any) => n?.name === view.node) : null;
  const advert = me ? decodeAdvert({ name: String(view.node), meta: me.meta ?? {} }) : null;
  const diff = advert ? cardMismatches(ours, advert.models) : [];
  if (diff.length > 0) out.push({ check, status: "fail", message: `disagrees on ${diff.join("; ")}`, fix: "use the same models[].block_size, tokenizer files and supervisor.python_hash_seed on every node (mismatched workers are not pooled)" });
  const clock = offsetResult(check, String(view?.node ?? seed), a);
  if (clock) out.push(clock);
  if (out.length === 0) out.push({ check, status: "ok", message: `node ${view?.node ?? "?"} answers, accepts the token${advert ? `, model cards agree (${advert.models.map((m) => m.model).join(", ") || "none shared"})` : ""}` });
  return out;
}

async function checkEtcd(config: Config, probe: DoctorProbe): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const ep of config.cluster.etcd.endpoints) {
    const check = `cluster ${ep}`;
    try {
      const a = await probe.http(`${ep.replace(/\/+$/, "")}/version`, { timeoutMs: PEER_TIMEOUT_MS });
      if (a.status !== 200) {
        out.push({ check, status: "fail", message: `GET /version → HTTP ${a.status}`, fix: "check that the endpoint is etcd's client URL" });
        continue;
      }
      const v = /"etcdserver"\s*:\s*"([^"]+)"/.exec(a.text)?.[1];
      out.push(offsetResult(check, "etcd", a) ?? { check, status: "ok", message: `etcd ${v ?? "(version not given)"} answers` });
    } catch (e) {
      out.push({ check, status: "fail", message: `etcd does not answer: ${(e as Error).message}`, fix: "start etcd or correct cluster.etcd.endpoints (herd with etcd discovery does not start without it)" });
    }
  }
  return out;
}
