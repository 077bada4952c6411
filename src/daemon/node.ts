// One node's parts, built from one Config, and the ordered list of services that runs them. The
// daemon (daemon.ts) starts that list, drains and stops it, and applies reloads; every part owns its
// own behaviour:
//   Supervisor (engine processes) ──onChange──▶ WorkerRegistry ◀── MetricsScraper (engine /metrics)
//                                                   ▲   │
//                                 Router (leases) ──┘   └──▶ Frontend (OpenAI API, /admin, /metrics)
// The cluster puts other nodes' workers into the same registry (legs for them go through their
// node's peer API); the KV index is shared by the kv policy, explain and the KV relay; one
// SharedPreprocessor serves routing and /admin/route/explain, so both hash a prompt alike.
import type { Clock } from "../core/clock.ts";
import { wallClockMs } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { NOOP_TRACER, type Tracer } from "../core/trace.ts";
import { SeededRng } from "../core/rng.ts";
import { seedFor } from "../core/seed.ts";
import { service, type Service } from "../core/service.ts";
import type { Config, Role } from "../config/types.ts";
import { LiveConfig } from "../config/live.ts";
import { WorkerRegistry } from "../workers/registry.ts";
import { Supervisor } from "../engine/supervisor.ts";
import { driverFor } from "../engine/drivers/registry.ts";
import { detectGpus } from "../engine/gpus.ts";
import { MetricsScraper } from "../engine/telemetry/scrape.ts";
import { HerdMetrics } from "../metrics/herd-metrics.ts";
import { registerNodeGauges } from "../metrics/node-gauges.ts";
import { decisionLogOf, engineView, fanOut, nodeGaugeSources } from "./observe.ts";
import type { RecordFile } from "../request/record-file.ts";
import { KvConsumer } from "../kv/consumer.ts";
import { OutlierDetector, Router } from "../router/index.ts";
import { SharedPreprocessor, policyNeedsPrompt } from "../preprocess/shared.ts";
import { HttpUpstream } from "../request/http-upstream.ts";
import { ClusterNode } from "../cluster/node.ts";
import { PeerFetcher } from "../cluster/peer-tier.ts";
import { RemoteUpstream } from "../cluster/forward.ts";
import { RelayIndex, relayEpoch } from "../cluster/kv-relay.ts";
import { TierService, tierAdminRoutes } from "../tier/service.ts";
import { tierIndexFeed, tierIndexReplay } from "../tier/tier-key.ts";
import { applyTierLaunch, tierPassword } from "../tier/launch.ts";
import { PlannerService } from "../planner/service.ts";
import { plannerGate } from "../planner/gate.ts";
import { plannerAdminRoutes } from "../planner/status.ts";
import { LocalActuator, poolIdOf } from "../planner/actuator-local.ts";
import { ClusterPlannerWiring } from "../planner/cluster-wire.ts";
import { gpusPerEngine } from "../engine/scale.ts";
import { PlannerMetrics } from "../planner/metrics.ts";
import { TransferLedger } from "../planner/signals.ts";
import type { AdminBackend } from "../admin/routes.ts";
import { kvAdminBackend } from "../admin/kv-explain.ts";
import { Frontend } from "../frontend/app.ts";
import { listen, parseListen, type Listening } from "../frontend/server.ts";
import type { Notifier } from "./notify.ts";
import { Readiness } from "./readiness.ts";
import { claimRuntimeFile, type RuntimeFile } from "./runtime-file.ts";
import { kvIngestService, peerAddress, preprocessService, supervisorService } from "./parts.ts";
import type { EnginePlan } from "../engine/types.ts";
import type { RouteRequest } from "../router/index.ts";
import { applyPdLaunch, hasPdRoles } from "../pd/launch.ts";
import { NixlMetadataThread } from "../pd/nixl-thread.ts";
import { explainPd, pdPlanBuilder, type PdPlanDeps } from "../pd/plan.ts";
import { PdMetrics } from "../pd/metrics.ts";
import type { PdObserver, PdTrace } from "../pd/orchestrator.ts";
import type { PlanBuilder } from "../request/plan.ts";
import { RecentRequests, recentRequestsRoute, type DecisionRecord } from "../request/record.ts";
import { memoryAdminRoute } from "./memory.ts";
import type { ThreadMemorySource } from "../core/thread-memory.ts";
import { certNotAfterS, loadListenerTls } from "../http/tls-files.ts";
import type { Endpoint } from "../protocol/openai.ts";

/** The last P/D requests' traces kept for inspection (both legs, the terms that chose each). */
export interface PdTraceEntry {
  requestId: string;
  trace: PdTrace;
}
const PD_TRACES_MAX = 256;

export interface NodeOptions {
  configPath: string | null;
  log: Logger;
  clock: Clock;
  /** The run's seed (src/core/seed.ts); every Rng of the node derives from it. */
  seed: number;
  notify: Notifier;
  /** Request spans (src/daemon/tracing.ts when tracing.enabled); default: none. */
  tracer?: Tracer;
}

export class HerdNode {
  /**
   * The one live-config handle: what runs now, the config plus the live keys of every SIGHUP reload
   * since. Every part wired here reads live keys through it (per request), or subscribes to it.
   */
  readonly live: LiveConfig;
  readonly registry: WorkerRegistry;
  readonly kv: KvConsumer;
  router: Router;
  /** Ejected workers and peer nodes; one detector across router reloads. */
  readonly outliers: OutlierDetector;
  readonly prompts: SharedPreprocessor;
  readonly metrics: HerdMetrics;
  readonly supervisor: Supervisor;
  readonly tier: TierService;
  readonly planner: PlannerService | null;
  readonly cluster: ClusterNode;
  readonly frontend: Frontend;
  readonly scraper: MetricsScraper;
  readonly readiness: Readiness;
  /** herd's NIXL metadata service, when an engine has a P/D role and pd.nixl_metadata is herd. */
  readonly nixl: NixlMetadataThread | null;
  /** The last finished requests' decision records, for the status page (/admin/requests). */
  readonly recent = new RecentRequests();
  /** The decision log (config decision_log), null when its path is empty. */
  readonly decisionLog: RecordFile | null;
  /** The last P/D requests' traces (bounded, newest last); empty without P/D models. */
  readonly pdTraces: PdTraceEntry[] = [];
  private pd: PdPlanDeps | null = null;
  /** SGLang-flow prefill workers' planned bootstrap ports (src/pd/launch.ts), for the legs' body. */
  private readonly bootstrapPorts = new Map<string, number>();
  /** The cluster planner's wiring (summaries, assignments, the cluster-wide status), when planner.enabled. */
  private plannerWire: ClusterPlannerWiring | null = null;
  /** KV transfers each prefill engine owes (the P/D orchestrator reports them; the planner reads them). */
  private readonly transfers = new TransferLedger();
  private listening: Listening | null = null;
  /** notAfter (Unix seconds) of frontend.tls.cert as loaded by the listener; null without TLS. */
  frontendCertNotAfterS: number | null = null;
  private runtime: RuntimeFile | null = null;

  constructor(
    readonly config: Config,
    private readonly o: NodeOptions,
  ) {
    const { clock, log, seed } = o;
    this.live = new LiveConfig(config);
    this.decisionLog = decisionLogOf(config, clock, log);
    this.registry = new WorkerRegistry(log.child("registry"));
    // The block index every reader shares: fed by the engines' KV events, read by the kv policy and
    // explain; it also relays this node's updates to the other nodes and holds theirs.
    const kvIndex = new RelayIndex(relayEpoch(new SeededRng(seedFor(seed, `kv-relay/${config.node.name}`))));
    // kv_ingest.threads > 0: engine event streams on worker threads, the index updated here (src/kv/threaded-ingest.ts).
    this.kv = new KvConsumer({ clock, log, index: kvIndex, ingestThreads: config.kv_ingest.threads, threaded: { maxInflightWords: config.kv_ingest.max_inflight_mib * 262_144 } });
    this.outliers = new OutlierDetector(clock, config.router.outlier);
    this.router = this.buildRouter(config.router);
    this.prompts = new SharedPreprocessor(config.models, { log: log.child("preprocess") });
    this.metrics = new HerdMetrics(config.models.map((m) => m.name), () => this.registry.list());
    registerNodeGauges(this.metrics.registry, nodeGaugeSources(this));
    // P/D: role flags and side-channel ports complete the engine plan; engines get the metadata endpoint.
    this.nixl = config.pd.nixl_metadata === "herd" && hasPdRoles(config) ? new NixlMetadataThread({ host: config.pd.nixl_metadata_host, port: 0, idleTimeoutMs: config.pd.nixl_metadata_idle_timeout_ms, clock, log: log.child("nixl-metadata") }) : null;
    this.supervisor = new Supervisor({
      config, clock, logger: log, inFlight: (id) => this.registry.inFlightOf(id), onChange: (w) => this.registry.upsert(w),
      // At an engine's drain deadline its requests migrate to other workers before it stops (issue 21).
      migrateAway: (id) => void this.frontend?.migrateAway(id),
      plan: { finish: (plans, portFree) => this.finishPlans(plans, portFree) },
    });
    // What the tier holds is credited in the index to this node's workers of the block's model.
    // A local tier miss asks the other nodes' tiers (issue 14); what is found is stored here.
    const peerFetch = new PeerFetcher({ peers: () => this.cluster.livePeers(), token: () => this.cluster.token(), fetch: (u, i) => this.cluster.transport.fetch(u, i), scheme: () => this.cluster.transport.scheme, clock, log: log.child("peer-fetch"), timeoutMs: config.kv_tier.resp?.peer_fetch_timeout_ms, sink: { put: (k, d) => this.tier.put(k, d) } });
    this.tier = new TierService({ config, clock, log: log.child("kv-tier"), thread: config.kv_tier.thread === "worker", onChange: tierIndexFeed(kvIndex, (m) => this.localWorkersOf(m)), remote: peerFetch });
    if (this.tier.enabled) this.tier.registerMetrics(this.metrics.registry);
    this.planner = this.buildPlanner();
    const localUpstream = new HttpUpstream(undefined, { clock, firstByteTimeoutMs: () => this.live.current.frontend.engine_first_byte_timeout_ms });
    this.cluster = new ClusterNode({
      config, registry: this.registry, clock, log, localUpstream, kvIndex, tierSource: { get: (k) => this.tier.peerGet(k) },
      rng: new SeededRng(seedFor(seed, `cluster/${config.node.name}`)),
      address: () => peerAddress(config.node.advertise, this.listening?.port ?? parseListen(config.frontend.listen).port),
      maxBodyBytes: () => this.live.current.frontend.max_body_bytes,
      draining: (): boolean => this.frontend.isDraining,
      leaving: (): boolean => this.frontend.isLeaving,
      maxInFlight: () => this.live.current.frontend.max_in_flight,
      planner: () => this.plannerWire?.routes() ?? null,
      tracer: o.tracer ?? NOOP_TRACER,
    });
    this.frontend = this.buildFrontend(localUpstream);
    // The frontend's admission, keys and timeouts; the router is swapped before the handle (apply).
    this.live.onChange((next) => this.frontend.applyConfig(next));
    const live = this.live;
    this.scraper = new MetricsScraper({
      registry: this.registry, clock, log: log.child("scrape"),
      // router.metrics_scrape_interval_ms is live (the router section is): read at every reschedule.
      get intervalMs() {
        return live.current.router.metrics_scrape_interval_ms;
      },
      owns: (w) => w.node === config.node.name, // remote workers' load comes in their node's advert
      // Engines state their KV capacity in /metrics (vLLM, sim, SGLang, TRT-LLM): size the index for it.
      onKvCapacity: (id, blocks) => this.kv.ingest.setCapacity(id, blocks),
    });
    // With the planner scaling every engines[] entry from zero, no worker is ready at start, by design.
    const fromZero = this.planner !== null && config.engines.length > 0 && config.engines.every((_, i) => config.planner.pools.some((p) => p.engine === i && p.min === 0));
    this.readiness = new Readiness({ registry: this.registry, notify: o.notify, clock, log, url: () => this.url, readyWithoutWorkers: fromZero });
  }

  /** The worker threads GET /admin/debug/memory asks for their own heaps (src/core/thread-memory.ts). */
  private workerThreads(): ThreadMemorySource[] {
    const tier = this.tier.threadMemory;
    return [...(tier ? [tier] : []), ...(this.nixl ? [this.nixl] : []), ...(this.frontend ? [this.frontend.json] : []), ...this.prompts.threads(), ...this.kv.ingest.threads()];
  }

  /** This node's workers of a model (what its KV tier holds is credited to them). */
  private localWorkersOf(model: string): string[] {
    return this.registry.list().filter((w) => w.node === this.config.node.name && w.model === model).map((w) => w.id);
  }

  get url(): string {
    return this.listening?.url ?? this.config.frontend.listen;
  }

  /**
   * Started first to last, stopped last to first. The runtime file first (refuse a data dir another
   * live herd owns), then the listener (a taken port fails before any engine starts), the cluster
   * (its peer API is on the listener, its port part of this node's address), engines, tokenizers
   * (loaded while the engines warm up), KV ingest, the tier, the scraper, the planner, readiness.
   */
  services(): Service[] {
    const { config } = this;
    const log = this.o.log;
    return [
      // First, so it stops last: the spans of the drain and of every other service's stop are exported.
      service("tracing", () => {}, () => (this.o.tracer ?? NOOP_TRACER).shutdown()),
      service("runtime-file", () => void (this.runtime = claimRuntimeFile(config, this.o.configPath, new Date(wallClockMs()).toISOString())), () => this.runtime?.release()),
      ...(this.decisionLog ? [service("decision-log", () => this.decisionLog!.start(), () => this.decisionLog!.close())] : []),
      service("listener", () => this.listen(), async () => {
        await this.listening?.stop(true);
        this.frontend.close();
      }),
      this.cluster,
      // Before the supervisor: engines get its endpoint in their environment. A departed worker's
      // agent metadata goes when its connection closes (orphan grace): herd does not know the NIXL
      // agent names (vLLM names its agent by engine id), so dropAgent is not called here.
      ...(this.nixl ? [this.nixl] : []),
      supervisorService(config, this.supervisor, this.registry, log),
      preprocessService(this.prompts, () => ({ needs: policyNeedsPrompt(this.router), policy: this.router.policy.name })),
      kvIngestService(config, this.kv, this.supervisor),
      service(
        "kv-tier",
        async () => {
          await this.tier.start();
          if (this.tier.enabled) tierIndexReplay(this.kv.index, await this.tier.entries(), (m) => this.localWorkersOf(m));
        },
        () => this.tier.stop(),
      ),
      service("scraper", () => this.scraper.start(), () => this.scraper.stop()),
      ...(this.planner ? [this.planner, this.plannerService()] : []),
      this.readiness,
    ];
  }

  /** The summary rounds, and held requests released when any node's engine of their pool turns ready. */
  private plannerService(): Service {
    let unsub: (() => void) | null = null;
    return service(
      "planner-cluster",
      () => {
        this.plannerWire!.start();
        unsub = this.registry.onChange(() => this.planner?.releaseReady());
      },
      () => {
        this.plannerWire!.stop();
        unsub?.();
      },
    );
  }

  /** What runs now (the live handle's value). */
  get running(): Config {
    return this.live.current;
  }

  /**
   * A reload's config: a changed `router` section is swapped in first (see swapRouter: the router
   * owns every routing knob, the P/D legs' presets included), then the live handle, which every
   * other consumer reads.
   */
  async apply(next: Config): Promise<void> {
    if (JSON.stringify(next.router) !== JSON.stringify(this.running.router)) await this.swapRouter(next);
    this.live.set(next);
  }

  private buildRouter(c: Config["router"]): Router {
    // router.seed pins the router's own stream; otherwise it is the run's seed.
    this.outliers.config = c.outlier;
    return new Router({
      config: c, registry: this.registry, clock: this.o.clock, seed: c.seed !== 0 ? c.seed : this.o.seed, log: this.o.log.child("router"), kvIndex: this.kv.index,
      outliers: this.outliers, self: this.config.node.name,
      // `cluster` is built after the first router: until then the view is not stale.
      isolated: () => this.cluster?.viewStale() ?? false,
    });
  }

  /**
   * Build the new Router (and the tokenizers its stages need) first, then swap it into the frontend
   * and admin, then close the old one (Caddy's reload order). On failure the old one keeps routing
   * and the running `router` section stays.
   */
  private async swapRouter(next: Config): Promise<void> {
    const fresh = this.buildRouter(next.router);
    if (policyNeedsPrompt(fresh)) {
      try {
        await this.prompts.start();
      } catch (e) {
        fresh.close();
        next.router = this.running.router;
        this.o.log.error("config reload: the new router needs each model's tokenizer, which cannot be loaded; keeping the running router", { err: errorMessage(e) });
        return;
      }
    }
    const old = this.router;
    this.router = fresh;
    this.frontend.swapRouter(fresh);
    old.close();
    this.o.log.info("router replaced", { policy: fresh.policy.name, seed: fresh.seed });
  }

  /**
   * The planner (off unless planner.enabled) scales the listed engines[] entries. One planner acts
   * for the cluster, the leader's (src/planner/cluster-wire.ts): every node counts its arrivals,
   * holds its requests and publishes a summary; the leader decides and sends fenced assignments;
   * this node applies them through its own supervisor (LocalActuator).
   */
  private buildPlanner(): PlannerService | null {
    const { config } = this;
    const { clock, log } = this.o;
    if (!config.planner.enabled) return null;
    const host = detectGpus();
    // The host's GPUs for placement: the detected ones, or as many as the engines[] entries name
    // (a declared inventory: `gpus: [0, 1]` says the host has at least GPUs 0 and 1).
    const declared = Math.max(0, ...config.engines.flatMap((e) => e.gpus).map((g) => g + 1));
    const actuator = new LocalActuator({
      config, supervisor: this.supervisor, clock, log: log.child("actuator"), inFlight: (id) => this.registry.inFlightOf(id), hostGpus: Math.max(host.ids.length, declared),
      pendingTransfers: (id) => this.transfers.pendingOf(id),
    });
    const metrics = new PlannerMetrics(this.metrics.registry);
    const entryOf = new Map(config.planner.pools.map((p) => [poolIdOf(config, p.engine), p.engine]));
    const gpusOf = (pool: string) => (entryOf.has(pool) ? gpusPerEngine(config, entryOf.get(pool)!, host) : 0);
    this.plannerWire = new ClusterPlannerWiring({
      membership: { self: config.node.name, leader: () => this.cluster.leadership(), peers: () => this.cluster.livePeers(), token: () => this.cluster.token() },
      clock, log: log.child("planner"), local: actuator, tickMs: config.planner.tick_ms, pools: [...entryOf.keys()], gpusOf, metrics, epoch: `${config.node.name}@${wallClockMs()}`,
    });
    const planner = new PlannerService({
      config, clock, log, actuator, metrics, gpusPerEngine: (i) => gpusPerEngine(config, i, host), cluster: this.plannerWire.planning,
      // Held requests go as soon as any node's engine of their pool is ready (the registry is cluster-wide).
      hasReady: (pool) => {
        const i = pool.lastIndexOf("/");
        return this.registry.eligible(pool.slice(0, i), pool.slice(i + 1) as Role).length > 0;
      },
    });
    this.plannerWire.attach(planner);
    return planner;
  }

  /** The OpenAI frontend: remote legs through their node's peer API; admin endpoints from their modules. */
  private buildFrontend(localUpstream: HttpUpstream): Frontend {
    const { config, registry, router, metrics, prompts, planner, cluster } = this;
    const upstream = new RemoteUpstream(localUpstream, {
      self: config.node.name, peerOf: (id) => cluster.peerOf(id), token: () => cluster.token(), fetch: (u, i) => cluster.transport.fetch(u, i),
      clock: this.o.clock, firstByteTimeoutMs: () => this.live.current.cluster.peer_first_byte_timeout_ms,
    });
    const pdPlan = this.pdPlan(); // before the admin backend, which explains P/D models with it
    const frontend = new Frontend({
      config, registry, router, metrics, clock: this.o.clock, log: this.o.log.child("frontend"), admin: this.adminBackend(), prompts, upstream, tokenizers: prompts,
      plan: pdPlan,
      tracer: this.o.tracer ?? NOOP_TRACER,
      ...(planner ? { gate: plannerGate(planner, registry, config.planner.dry_run) } : {}),
      adminRoutes: [...tierAdminRoutes(this.tier), ...(planner && this.plannerWire ? plannerAdminRoutes(this.plannerWire) : []), recentRequestsRoute(this.recent, wallClockMs), memoryAdminRoute(() => this.workerThreads())],
      // The planner's SLA mode reads each finished request's measured TTFT and ITL.
      records: fanOut(this.recent.sink, ...(this.decisionLog ? [this.decisionLog.write] : []), ...(planner ? [(r: DecisionRecord) => r.model !== null && planner.recordLatency(r.model, r.ttft_ms, r.itl_ms)] : [])),
      sharedBudgets: cluster.quota.leases,
      enginePriority: (id) => this.enginePriority(id),
    });
    // The peer API shares the listener (token-checked in src/cluster/routes.ts); the remote address
    // is passed as the frontend's Bun.serve shell passes it (src/frontend/server.ts).
    // With cluster.listen (mutual TLS) the peer API is only there: the frontend answers 404.
    if (config.cluster.listen === "") frontend.app.all("/cluster/v1/*", (c) => cluster.handle(c.req.raw, { ip: c.env?.ip ?? null }));
    return frontend;
  }

  /**
   * Whether a local worker's engine schedules by the request `priority` (its driver's
   * `requestPriority` on its engines[] entry's args). Remote workers: no (their adverts do not say).
   */
  private enginePriority(id: string): boolean {
    const plan = this.supervisor.plans().find((p) => p.id === id);
    const entry = plan ? this.live.current.engines[plan.entryIndex] : undefined;
    return plan !== undefined && entry !== undefined && (driverFor(plan.kind).requestPriority?.(entry.args) ?? false);
  }

  /** Supervisor-backed admin operations; an operator's drain is a cordon in the registry. */
  private adminBackend(): AdminBackend {
    const { supervisor, registry } = this;
    const log = this.o.log;
    const known = (id: string) => supervisor.list().some((w) => w.id === id);
    const cordon = (id: string, on: boolean): boolean => {
      if (!known(id) || !registry.cordon(id, on)) return false;
      log.info(`worker ${on ? "drained" : "undrained"} by admin`, { worker: id });
      return true;
    };
    return {
      ...kvAdminBackend(this.config, this.kv, this.prompts),
      logs: (id, lines) => (known(id) ? supervisor.logs(id).slice(-lines) : null),
      pid: (id) => supervisor.status().find((s) => s.worker.id === id)?.pid ?? null,
      engine: (id) => engineView(supervisor, id),
      lastError: (id) => (known(id) ? supervisor.lastError(id) : null),
      drain: (id) => cordon(id, true),
      undrain: (id) => cordon(id, false),
      cluster: () => this.cluster.view(),
      ...(this.pd ? { pdExplain: (route: RouteRequest, json: Record<string, unknown>, endpoint: Endpoint) => explainPd(this.pd!, { endpoint, body: JSON.stringify(json), stream: json.stream === true, route, json }), pdTraces: () => [...this.pdTraces] } : {}),
    };
  }

  /**
   * Models with prefill and decode workers run the P/D plan (src/pd); the others today's one leg.
   * Built on every node: which models are P/D is decided per request from the cluster-wide
   * registry (pdServes), so a node without P/D engines still splits a request over other nodes'
   * prefill and decode workers, and a decode-only node can pair with a remote prefill node.
   */
  private pdPlan(): PlanBuilder {
    const node = this;
    this.pd = {
      // The live config and router, read per request: a reload reaches P/D as it reaches aggregated routing.
      config: () => node.live.current, router: () => node.router,
      registry: this.registry, clock: this.o.clock,
      rng: new SeededRng(seedFor(this.o.seed, "pd")), log: this.o.log.child("pd"), observer: withTransfers(new PdMetrics(this.metrics.registry), this.transfers),
      bootstrapPort: (w) => this.bootstrapPorts.get(w.id) ?? null,
      onTrace: (requestId, trace) => {
        this.pdTraces.push({ requestId, trace });
        if (this.pdTraces.length > PD_TRACES_MAX) this.pdTraces.shift();
      },
    };
    return pdPlanBuilder(this.pd!);
  }

  /** Role flags and side-channel ports after the engine ports are fixed (src/pd/launch.ts). */
  private finishPlans(plans: EnginePlan[], portFree: (host: string, port: number) => boolean): void {
    const listenPort = parseListen(this.config.frontend.listen).port;
    const lines = applyPdLaunch(this.config, plans, {
      isPortFree: (p) => portFree("0.0.0.0", p), reserved: [listenPort, ...(this.nixl ? [this.nixl.port] : [])], nixlEndpoint: () => this.nixl?.endpoint ?? null,
      bootstrap: (id, port) => this.bootstrapPorts.set(id, port),
    });
    for (const line of lines) this.o.log.info(`P/D ${line}`);
    for (const line of applyTierLaunch(this.config, plans, () => tierPassword(this.config))) this.o.log.info(line);
  }

  private listen(): void {
    const { config } = this;
    const { host, port } = parseListen(config.frontend.listen);
    try {
      const tls = loadListenerTls("frontend.tls", config.frontend.tls);
      this.frontendCertNotAfterS = tls ? certNotAfterS(tls.cert, "frontend.tls.cert") : null;
      this.listening = listen(this.frontend, host, port, config.frontend.max_body_bytes, tls);
    } catch (e) {
      throw new Error(`cannot listen on ${config.frontend.listen}: ${errorMessage(e)}`);
    }
    this.runtime?.listening(this.listening.url);
    this.o.log.info("listening", { url: this.listening.url, config: this.o.configPath ?? "(embedded default)", policy: this.router.policy.name });
  }
}

/** The P/D observer the orchestrator reports to: herd's metrics, and the transfers the planner reads. */
function withTransfers(metrics: PdObserver, ledger: TransferLedger): PdObserver {
  return {
    decision: (d) => metrics.decision(d),
    fallback: (r) => metrics.fallback(r),
    prefillDone: (ms) => metrics.prefillDone(ms),
    transferToFirstToken: (ms) => metrics.transferToFirstToken(ms),
    pair: (p, d) => metrics.pair(p, d),
    abandonedPrefill: (w) => {
      metrics.abandonedPrefill(w);
      ledger.abandonedPrefill(w);
    },
    transferOwed: (w) => ledger.transferOwed(w),
    transferPulled: (w) => ledger.transferPulled(w),
  };
}
