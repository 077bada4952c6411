// The one description of herd's config: keys, types, defaults, bounds and docs. Validation
// (resolve.ts + validate.ts), `defaultConfig()` and config/herd.schema.json all come from here; the
// compile-time check at the bottom keeps it identical to the Config contract in types.ts.
//
// Where a default comes from:
// - timeouts and drain: docs/references.md#reliability-1.3 (Dynamo, Envoy, llm-d figures), test plan #reliability-R5, #reliability-R6, #reliability-R7;
// - startup: docs/references.md#timing-A.3 (vLLM waits 600 s for its engine cores, and a
//   big model can take minutes to load), so startup_timeout_ms is 10 minutes;
// - scheduling budgets: engine defaults stay the engines' own; herd only bounds its own queues.

import { ENGINE_KINDS, PIPELINE_FILTERS, PIPELINE_PICKERS, PIPELINE_SCORERS, POLICIES, PREFILL_LOAD_MODELS, PREFIX_CACHING_HASH_ALGOS, ROLES, type Config } from "./types.ts";
import { bool, int, list, ms, nullable, num, obj, oneOf, reserved, str, strMap, type Infer } from "./spec.ts";
import { checkAdvertise, checkHealthPath, checkListen, checkUrl } from "./checks.ts";


const node = obj("This host: its name, the address peers reach it at, and where it keeps state.", {
  name: str("Stable node name. Default: the host name.", (env) => env.hostname, { nonEmpty: true }),
  advertise: str("Address other nodes use to reach this one (host or IP, no port).", "127.0.0.1", {
    nonEmpty: true,
    check: checkAdvertise,
  }),
  data_dir: str(
    "Logs and state. Default: $STATE_DIRECTORY (systemd), else /var/lib/herd when root can write there, else $XDG_DATA_HOME/herd or ~/.local/share/herd, else ./.herd.",
    (env) => env.dataDir,
    { nonEmpty: true },
  ),
});

const frontend = obj("The OpenAI-compatible listener (also serves /admin and /metrics).", {
  listen: str("HOST:PORT to listen on; `herd run --listen` overrides it. Port 0 picks a free port.", "127.0.0.1:8000", {
    check: checkListen,
    pattern: "^(\\[[0-9A-Fa-f:.]+\\]|[^:\\s\\[\\]]+):[0-9]{1,5}$",
  }),
  api_keys: list(str("A bearer key.", undefined, { nonEmpty: true }), "Bearer keys accepted on /v1/*; empty = no auth.", []),
  admin_token: str("Bearer token for /admin from non-loopback clients; empty = /admin is loopback-only.", ""),
  max_body_bytes: int("Request bodies above this get 413.", 10 * 1024 * 1024, { min: 1024, max: 1024 ** 3 }),
  max_in_flight: int("Requests in flight beyond this get 429 (bounds herd's own queue).", 4096, { min: 1, max: 1_000_000 }),
  first_token_timeout_ms: ms("A stream with no first token after this is aborted (hung or overloaded engine).", 60_000),
  idle_timeout_ms: ms("A stream silent this long after its first token is aborted.", 30_000),
  drain_timeout_ms: ms("On SIGTERM, admitted streams get this long to finish before engines stop.", 30_000),
});

const router = obj("How requests are spread across engines.", {
  policy: oneOf(POLICIES, "Routing policy (`kv`: engine KV events + load; `prefix`: remembered routing history + load).", "kv"),
  seed: int("Seed of the router's own stream (ties, random, power-of-two); 0 = the node's `seed`.", 0, { min: 0, max: 2 ** 32 - 1 }),
  session: obj("Knobs of the `session` policy (consistent hashing with bounded load).", {
    header: str("Request header carrying the session id.", "x-session-id", {
      nonEmpty: true,
      check: (v) => (/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(v) ? null : "expected an HTTP header name"),
      pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",
    }),
    load_factor: num("A worker is skipped when its load exceeds factor × mean load + 1.", 1.25, { min: 1, max: 100 }),
    virtual_nodes: int("Virtual nodes per worker on the hash ring.", 160, { min: 1, max: 10_000 }),
  }),
  retry: obj("Retries of failures before the first byte (never after it).", {
    attempts: int("Extra attempts on another worker.", 1, { min: 0, max: 10 }),
    budget_ratio: num("Retries allowed as a fraction of recent requests (Envoy: 20 %).", 0.2, { min: 0, max: 1 }),
    min_retries_per_window: int("Retries always allowed, so a quiet service can still retry (Envoy: 3).", 3, {
      min: 0,
      max: 10_000,
    }),
  }),
  metrics_scrape_interval_ms: ms("How often engine /metrics are scraped to correct herd's own load accounting.", 1000),
  kv: obj("Cost knobs of the `kv` and `prefix` policies (Dynamo's form: prefill_load_scale × blocks to prefill + active decode blocks).", {
    // 8, not Dynamo's 1: a block still to prefill delays the next first token far more than an
    // active decode block does; the routing quality benchmark (docs/benchmarks.md) picked it.
    prefill_load_scale: num("Weight of the prefill term (blocks still to compute after overlap credit) against active decode blocks.", 8, {
      min: 0,
      max: 1000,
    }),
    overlap_credit: obj("Credit per overlapping block by medium; a block held on GPU needs no prefill, one on CPU/disk needs a copy.", {
      gpu: num("Credit per leading block held in GPU memory.", 1, { min: 0, max: 10 }),
      cpu: num("Credit per further leading block held in CPU memory.", 0.75, { min: 0, max: 10 }),
      disk: num("Credit per further leading block held on disk.", 0.25, { min: 0, max: 10 }),
    }),
    temperature: num("0 = the cheapest worker (ties at random); > 0 = softmax sampling over min-max normalised cost.", 0, { min: 0, max: 100 }),
    predicted_ttl_ms: ms("`kv`: count a decision's blocks as cached on its worker this long, until the engine's events arrive; 0 = off.", 2000),
    prefill_load_model: oneOf(
      PREFILL_LOAD_MODELS,
      "`progress`: a prompt still prefilling counts minus the tokens its worker computed since dispatch (rate learned from first tokens), so the worker whose prefill is nearly done looks nearly free; `none`: in full until its first token (Dynamo's default).",
      "progress",
    ),
  }),
  prefix: obj("The `prefix` policy's memory of which prompt blocks it sent to which worker (no engine events needed).", {
    ttl_ms: ms("A remembered block counts as cached for this long after the last request that sent it (Dynamo: 120 s).", 120_000),
    max_blocks_per_worker: int("Remembered blocks per worker; the least recently sent are forgotten first.", 65_536, {
      min: 1,
      max: 16_777_216,
    }),
  }),
  pipeline: obj("The `kv`/`prefix` pipeline: filters, then weighted scorers (costs in KV blocks, lower wins), then a picker.", {
    filters: list(oneOf(PIPELINE_FILTERS, "A filter."), "Filters in order (the router already keeps only ready workers of the model).", [
      "overload",
    ]),
    overload: obj("SGLang-style imbalance guard: a worker is dropped when its load exceeds the least loaded one's by both thresholds.", {
      abs_threshold: num("Load (requests) above the least loaded worker's.", 32, { min: 0, max: 1_000_000 }),
      rel_threshold: num("Load as a multiple of the least loaded worker's.", 1.5, { min: 1, max: 1000 }),
    }),
    scorers: list(
      obj("A weighted scorer.", {
        type: oneOf(
          PIPELINE_SCORERS,
          "`kv-cost`: Dynamo's cost; `load`: effective load in requests; `session`: minus the request's blocks on the session's last worker.",
        ),
        weight: num("Multiplier of the scorer's cost.", 1, { min: 0, max: 1000 }),
      }),
      "Scorers whose weighted costs are summed per worker.",
      [
        { type: "kv-cost", weight: 1 },
        { type: "session", weight: 0.5 },
      ],
      16,
    ),
    picker: oneOf(PIPELINE_PICKERS, "`softmax` (router.kv.temperature; 0 = cheapest), `min` (the cheapest), `lightest` (the cheapest, ties to lower KV usage), `power-of-two` (the lighter of two drawn at random), `random`, `round-robin` (per model, in worker-id order), `ring` (session ring with bounded load, router.session).", "softmax"),
  }),
});

const modelEntry = obj("A model clients can ask for.", {
  name: str("The model name clients send (served model name).", undefined, { nonEmpty: true }),
  path: str("What engines load (HF repo id or local path). Default: `name`.", undefined, { defaultFrom: "name" }),
  tokenizer: str("Directory with tokenizer.json (+ tokenizer_config.json); empty = built-in fallback (sim only).", ""),
  block_size: int("KV block size in tokens; must match the engines'.", 16, { min: 1, max: 1024 }),
  max_model_len: int("Context window passed to engines as --max-model-len; 0 = engine default.", 0, { min: 0 }),
  prefix_caching_hash_algo: oneOf(
    PREFIX_CACHING_HASH_ALGOS,
    "vLLM engines' --prefix-caching-hash-algo; \"\" = engine default. One value per model: every engine of the model hashes its blocks alike.",
    "",
  ),
});

const kvEvents = obj("KV event endpoints (ZMQ) of an engine.", {
  endpoint: str("PUB endpoint, e.g. tcp://10.0.0.12:5557.", undefined, { nonEmpty: true }),
  replay_endpoint: str("ROUTER endpoint for replaying missed events; empty = none.", ""),
  topic: str("Topic prefix to subscribe to; empty = all.", ""),
});

const engineEntry = obj(
  "One or more identical engines serving a model.",
  {
    kind: oneOf(ENGINE_KINDS, "Engine kind: started by herd, or `external` (a URL herd routes to but does not start)."),
    model: str("A models[].name.", undefined, { nonEmpty: true }),
    count: int("Identical engines from this entry.", 1, { min: 1, max: 1024 }),
    role: oneOf(ROLES, "Serving role.", "aggregated"),
    gpus: list(int("A GPU id.", undefined, { min: 0, max: 1023 }), "GPU ids; with count > 1 split evenly, in order.", []),
    host: str("Host the engine binds to (and herd connects to).", "127.0.0.1", { nonEmpty: true, check: checkAdvertise }),
    port: int("First engine's port; 0 = allocate from supervisor.port_range_start. Engine i gets port + i.", 0, {
      min: 0,
      max: 65535,
    }),
    args: list(str("An argument."), "Extra command-line arguments appended to the generated command line.", []),
    env: strMap("Extra environment variables for the engine process.", "^[A-Za-z_][A-Za-z0-9_]*$"),
    command: list(str("An argument."), "Full argv for kind `command`; {port}, {model}, {host} are substituted.", []),
    url: str("Base URL for kind `external` (http or https).", "", { check: (v) => (v === "" ? null : checkUrl(v)) }),
    kv_events: nullable(kvEvents, "KV event endpoints (for `external`, or to override the generated ones); null = none."),
    health_path: str("Health path polled before the engine takes traffic.", "/health", { check: checkHealthPath }),
    gpu_memory_utilization: num("vLLM --gpu-memory-utilization: share of each GPU's total memory; 0 = engine default.", 0, { min: 0, max: 1 }),
    share_gpu: bool("Let these engines share a GPU with other engines (a warning instead of an error).", false),
  },
  {
    allOf: [
      { if: { properties: { kind: { const: "external" } } }, then: { required: ["url"] } },
      { if: { properties: { kind: { const: "command" } } }, then: { required: ["command"] } },
    ],
  },
);

const supervisor = obj("Starting, health-checking, restarting and stopping engine processes.", {
  port_range_start: int("Ports for engines with port 0 are allocated upwards from here.", 20000, { min: 1024, max: 65535 }),
  health_interval_ms: ms("Health probe interval.", 2000),
  health_timeout_ms: ms("A probe slower than this counts as failed.", 2000),
  unhealthy_threshold: int("Consecutive failed probes before a ready worker leaves rotation.", 3, { min: 1, max: 1000 }),
  startup_timeout_ms: ms("An engine not healthy within this is killed and restarted (real models load for minutes).", 600_000),
  restart_backoff_initial_ms: ms("First restart delay; doubles per consecutive crash.", 1000),
  restart_backoff_max_ms: ms("Restart delay cap.", 60_000),
  max_restarts: int("Consecutive crashes before the worker is `failed`.", 5, { min: 1, max: 1_000_000 }),
  restart_reset_ms: ms("An engine up this long resets its crash count.", 600_000),
  stop_timeout_ms: ms("SIGTERM → SIGKILL grace when stopping an engine.", 30_000),
  log_tail_lines: int("Lines of engine output kept in memory per engine (full logs under data_dir/logs).", 200, {
    min: 0,
    max: 100_000,
  }),
  python_hash_seed: int("PYTHONHASHSEED for every Python engine (identical across engines so block hashes agree).", 0, {
    min: 0,
    max: 4_294_967_295,
  }),
});

/** The embedded demo: used when a config sets neither `models` nor `engines` (see resolve.ts). */
export const DEMO_MODEL = "herd-sim";
const demoModels = () => [{ name: DEMO_MODEL, path: DEMO_MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "" as const }];
const demoEngines = () => [
  {
    kind: "sim" as const,
    model: DEMO_MODEL,
    count: 2,
    role: "aggregated" as const,
    gpus: [],
    host: "127.0.0.1",
    port: 0,
    args: [],
    env: {},
    command: [],
    url: "",
    kv_events: null,
    health_path: "/health",
    gpu_memory_utilization: 0,
    share_gpu: false,
  },
];

export const configSpec = obj("herd configuration (one file per node).", {
  seed: int("The run's seed: every random choice (routing ties and draws, reconnect jitter) derives from it, so one seed replays a run; HERD_SEED overrides it; 0 = drawn at start (and logged).", 0, { min: 0, max: 2 ** 32 - 1 }),
  node,
  frontend,
  router,
  models: list(modelEntry, "Models served. Default (with no `engines` either): one simulated model `herd-sim`.", demoModels, 1000),
  engines: list(engineEntry, "Engines. Default (with no `models` either): two `sim` engines serving `herd-sim`.", demoEngines, 1000),
  supervisor,
  cluster: reserved("Reserved for multi-node clustering.", "multi-node clustering arrives in a later release"),
  kv_tier: reserved("Reserved for the KV cache tier.", "the KV cache tier arrives in a later release"),
  planner: reserved("Reserved for the planner.", "the planner arrives in a later release"),
});

// Compile-time guard: the schema resolves to exactly the Config contract.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const schemaMatchesTypes: Equal<Infer<typeof configSpec>, Config> = true;
void schemaMatchesTypes;
