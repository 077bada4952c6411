// The peer API as a hono sub-app for the integrator to mount on the node's listener:
//   app.route("/", clusterRoutes(service))
// Every route needs the cluster token (or, without one, a loopback caller); others get 401.
// /forward carries remote request legs (forward.ts) when the daemon wires it.
// The gossip/vote/beat routes exist for the peers backend; other backends answer 404 there.
import { Hono, type Context } from "hono";
import { PEER_API_PREFIX } from "./client.ts";
import { PeersBackend } from "./peers.ts";
import type { ClusterService } from "./service.ts";
import { tierAnswer, type PeerTierSource } from "./peer-tier.ts";
import { HerdError } from "../core/errors.ts";
import { parseJson, readBodyLimited } from "../http/body.ts";

/** Peer messages carry every member's advert (≤ 256 workers each); anything bigger is refused. */
export const PEER_BODY_MAX_BYTES = 16 * 1024 * 1024;
/** A KV relay cursor is `{epoch, seq}`: a few dozen bytes. */
export const KV_CURSOR_MAX_BYTES = 4096;

/**
 * The JSON body under a byte bound counted while it arrives (readBodyLimited): a chunked body has no
 * Content-Length, so checking the header alone let a 400 MiB gossip through (issue 22, row 1).
 */
async function peerJson(req: Request, limitBytes: number): Promise<{ body: unknown } | Response> {
  try {
    return { body: parseJson(await readBodyLimited(req, limitBytes)) };
  } catch (e) {
    if (!(e instanceof HerdError)) throw e;
    return Response.json(e.toJSON(), { status: e.status });
  }
}

type Env = { Bindings: { ip?: string | null } };

export interface ClusterRouteOptions {
  /** POST /cluster/v1/forward: run a remote node's leg on one of this node's workers (forward.ts). */
  forward?: (req: Request) => Promise<Response>;
  /** POST /cluster/v1/kv: this node's KV index updates after a reader's cursor (kv-relay.ts). */
  kv?: (cursor: { epoch: string; seq: number }) => unknown;
  /** GET /cluster/v1/tier/<url-encoded key>: an object of this node's KV tier for a peer (peer-tier.ts). */
  tier?: PeerTierSource;
  /** POST /cluster/v1/planner/{summary,assign,push,status}: the cluster planner (src/planner/cluster-wire.ts). */
  planner?: () => PeerPlannerRoutes | null;
  /** POST /cluster/v1/quota: a node's lease ask to the leader (quota.ts); null = not the leader (409), "bad" = 400. */
  quota?: { maxBytes: number; answer: (body: unknown) => unknown };
}

/** The planner's peer routes: the leader pulls summaries and sends assignments; a follower pushes its summary. */
export interface PeerPlannerRoutes {
  summary(): unknown;
  assign(body: unknown): Promise<unknown>;
  push(body: unknown): unknown;
  status(): unknown;
}

/** An assignment is one action with an id, a term and a leader's name: a few hundred bytes. */
export const PLANNER_ASSIGN_MAX_BYTES = 16 * 1024;
/** A pushed node summary: its engines (≤ 4096) and pools. */
export const PLANNER_SUMMARY_MAX_BYTES = 4 * 1024 * 1024;

export function clusterRoutes(service: ClusterService, opts: ClusterRouteOptions = {}): Hono<Env> {
  const app = new Hono<Env>();
  app.use(`${PEER_API_PREFIX}/*`, async (c, next) => {
    const ip = (c.env as { ip?: string | null } | undefined)?.ip ?? null;
    if (!service.auth.check(c.req.header("authorization"), ip, c.req.path))
      return c.json({ error: { message: "cluster token required", type: "authentication_error", code: "cluster_unauthorized" } }, 401);
    await next();
  });

  app.get(`${PEER_API_PREFIX}/view`, (c) => c.json(service.view()));
  const forward = opts.forward;
  if (forward) app.post(`${PEER_API_PREFIX}/forward`, (c) => forward(c.req.raw));
  const kv = opts.kv;
  if (kv)
    app.post(`${PEER_API_PREFIX}/kv`, async (c) => {
      const read = await peerJson(c.req.raw, KV_CURSOR_MAX_BYTES);
      if (read instanceof Response) return read;
      const body = read.body as { epoch?: unknown; seq?: unknown } | null;
      const epoch = typeof body?.epoch === "string" ? body.epoch : "";
      const seq = Number.isSafeInteger(body?.seq) ? (body!.seq as number) : 0;
      return c.json(kv({ epoch, seq }) as object);
    });

  const tier = opts.tier;
  if (tier)
    app.get(`${PEER_API_PREFIX}/tier/*`, (c) => {
      // From the raw URL: the key is one percent-encoded segment and may itself contain "/" or "%".
      const raw = new URL(c.req.url).pathname.slice(`${PEER_API_PREFIX}/tier/`.length);
      let key = "";
      try {
        key = decodeURIComponent(raw);
      } catch {
        return c.json({ error: { message: "bad key encoding", type: "invalid_request_error" } }, 400);
      }
      return tierAnswer(tier, key);
    });

  const quota = opts.quota;
  if (quota)
    app.post(`${PEER_API_PREFIX}/quota`, async (c) => {
      const read = await peerJson(c.req.raw, quota.maxBytes);
      if (read instanceof Response) return read;
      const reply = quota.answer(read.body);
      if (reply === null) return c.json({ error: { message: "this node is not the leader", type: "invalid_request_error", code: "not_leader" } }, 409);
      if (reply === "bad") return c.json({ error: { message: "malformed quota ask", type: "invalid_request_error", code: "bad_quota_ask" } }, 400);
      return c.json(reply as object);
    });

  const planner = opts.planner;
  if (planner) {
    const route = (path: string, limitBytes: number, handle: (p: PeerPlannerRoutes, body: unknown) => unknown) =>
      app.post(`${PEER_API_PREFIX}/planner/${path}`, async (c: Context) => {
        const p = planner();
        if (!p) return c.json({ error: { message: "the planner is off on this node", type: "not_found_error", code: "planner_off" } }, 404);
        const read = await peerJson(c.req.raw, limitBytes);
        if (read instanceof Response) return read;
        return c.json((await handle(p, read.body)) as object);
      });
    route("summary", PLANNER_ASSIGN_MAX_BYTES, (p) => p.summary());
    route("assign", PLANNER_ASSIGN_MAX_BYTES, (p, body) => p.assign(body));
    route("push", PLANNER_SUMMARY_MAX_BYTES, (p, body) => p.push(body));
    route("status", PLANNER_ASSIGN_MAX_BYTES, (p) => p.status());
  }

  const peersRoute = (path: string, handle: (b: PeersBackend, body: any, ip: string | null) => unknown) =>
    app.post(`${PEER_API_PREFIX}/${path}`, async (c: Context) => {
      const b = service.backend;
      if (!(b instanceof PeersBackend)) return c.json({ error: { message: "not a peers cluster", type: "not_found_error" } }, 404);
      const read = await peerJson(c.req.raw, PEER_BODY_MAX_BYTES);
      if (read instanceof Response) return read;
      return c.json(handle(b, read.body, (c.env as { ip?: string | null } | undefined)?.ip ?? null) as object);
    });
  peersRoute("gossip", (b, body, ip) => b.onGossip(body, ip));
  peersRoute("vote", (b, body) => b.onVote(body));
  peersRoute("beat", (b, body) => b.onBeat(body));
  return app;
}
