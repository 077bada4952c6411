// The one description of herd's config: keys, types, defaults, bounds and docs. Validation
// (resolve.ts + validate.ts), `defaultConfig()` and config/herd.schema.json all come from here; the
// compile-time check at the bottom keeps it identical to the Config contract in types.ts.
//
// Where a default comes from:
// - timeouts and drain: docs/references.md#reliability-1.3 (Dynamo, Envoy, llm-d figures), test plan #reliability-R5, #reliability-R6, #reliability-R7;
// - startup: docs/references.md#timing-A.3 (vLLM waits 600 s for its engine cores, and a
//   big model can take minutes to load), so startup_timeout_ms is 10 minutes;
// - scheduling budgets: engine defaults stay the engines' own; herd only bounds its own queues.

import { DECODE_LOAD_MODELS, DISCOVERY_KINDS, ENGINE_KINDS, KV_LOAD_FAILURE_POLICIES, NIXL_METADATA_MODES, PIPELINE_FILTERS, PIPELINE_PICKERS, PIPELINE_SCORERS, POLICIES, PREFILL_LOAD_MODELS, PREFIX_CACHING_HASH_ALGOS, ROLES, TRACING_PROTOCOLS, TRACING_SAMPLERS, type Config } from "./types.ts";
import { bool, int, list, ms, nullable, num, obj, oneOf, reserved, str, strMap, strOrObj, type Infer } from "./spec.ts";
import { checkAdvertise, checkHealthPath, checkListen, checkSize, checkUrl, parseHostPort } from "./checks.ts";


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
  api_keys: list(
    strOrObj(
      str("A bearer key.", undefined, { nonEmpty: true }),
      obj("A tenant: its key (or a file holding it), its name in metrics, limits and priority.", {
        key: str("The bearer key; or set key_file.", ""),
        key_file: str("File whose content (trimmed) is the key; relative = next to the config file.", ""),
        name: str("Tenant name in metrics and logs (never the key). Default: tenant-<index>.", ""),
        rpm: int("Requests per minute; 0 = unlimited.", 0, { min: 0, max: 100_000_000 }),
        tpm: int("Tokens per minute (prompt + max_tokens, charged at admission); 0 = unlimited.", 0, { min: 0, max: 1e12 }),
        concurrency: int("Requests in flight at once; 0 = unlimited.", 0, { min: 0, max: 1_000_000 }),
        priority: int("Priority class when herd queues (higher first); a request may lower its own with x-herd-priority.", 0, { min: -100, max: 100 }),
      }),
      "A bearer key, or a tenant object.",
    ),
    "Bearer keys accepted on /v1/*; empty = no auth.",
    [],
  ),
  admin_token: str("Bearer token for /admin from non-loopback clients; empty = /admin is loopback-only.", ""),
  max_body_bytes: int("Request bodies above this get 413.", 10 * 1024 * 1024, { min: 1024, max: 1024 ** 3 }),
  max_in_flight: int("Requests in flight beyond this get 429 (bounds herd's own queue).", 4096, { min: 1, max: 1_000_000 }),
  first_token_timeout_ms: ms("A stream with no first token after this is aborted (hung or overloaded engine).", 60_000),
  idle_timeout_ms: ms("A stream silent this long after its first token is aborted.", 30_000),
  drain_timeout_ms: ms("On SIGTERM, admitted streams get this long to finish before engines stop.", 30_000),
  leave_grace_ms: ms("On SIGTERM with other nodes in the cluster: workers are published as draining and /health turns 503 first; requests still arriving are served for this long, then the drain starts (Dynamo's order).", 2000),
  // Per-request work bounds (docs/benchmarks.md "Worst-case bodies"): each step whose cost grows
  // with the input is capped with a 400 before it runs.
  max_messages: int("Chat requests with more messages than this get 400.", 4096, { min: 1, max: 1_000_000 }),
  max_prompt_chars: int("Requests with more prompt characters (all messages, or the prompt) get 400.", 4 * 1024 * 1024, { min: 1, max: 1024 ** 3 }),
  max_json_values: int("Bodies with more JSON values than this get 400 before being parsed on the event loop.", 131_072, { min: 1024, max: 100_000_000 }),
  max_body_bytes_in_flight: int("Bytes of request bodies being read at once; beyond it 503 + Retry-After (at least one max_body_bytes body always fits).", 128 * 1024 * 1024, { min: 1024, max: 64 * 1024 ** 3 }),
  metrics: oneOf(["open", "token", "loopback"] as const, "Who may read /metrics on a non-loopback listener (`token` = the admin token).", "open"),
  queue: obj("herd's own queue when every worker of a model is saturated: priority, then fair share (VTC) between tenants.", {
    worker_slots: int("Requests in flight per ready worker of a model before herd queues the next (0 = never queue).", 0, { min: 0, max: 1_000_000 }),
    max_waiting: int("Requests waiting per node; beyond it 503 + Retry-After.", 1024, { min: 1, max: 1_000_000 }),
    timeout_ms: ms("A request waiting longer gets 503 + Retry-After.", 30_000),
    aging_ms: ms("Waiting this long raises a request's priority by one class (no starvation); 0 = never.", 10_000),
    headroom_slots: int("Of each worker's worker_slots, this many are held back for tenants under their fair share of the model's slots (a tenant over it queues first); 0 = none.", 0, { min: 0, max: 1_000_000 }),
  }),
  lora: obj("On-demand LoRA adapters (models[].lora_adapters[].on_demand): placement and unloading.", {
    max_per_engine: int("On-demand adapters loaded at once per engine (vLLM --max-loras); a full engine unloads its least recently used idle one first.", 4, { min: 1, max: 1024 }),
    idle_ms: ms("An on-demand adapter unused this long on an engine is unloaded.", 300_000),
    spread_in_flight: int("When every engine holding an adapter has this many requests in flight, it is loaded on one more engine.", 8, { min: 1, max: 1_000_000 }),
  }),
  tls: obj("Optional TLS on frontend.listen (https): `cert` and `key` together; with `ca` as well, clients must present a certificate that CA signed (mutual TLS). Read at start; a change needs a restart.", {
    cert: str("PEM certificate chain the frontend presents (its subjectAltName must name the address clients dial).", ""),
    key: str("PEM private key of `cert` (mode 0600 or 0640).", ""),
    ca: str("PEM CA bundle for client certificates; empty = no client certificate asked for.", ""),
  }),
  responses_store_bytes: int("Bytes of finished /v1/responses conversations kept for previous_response_id (least recently used dropped first); 0 = none kept.", 64 * 1024 * 1024, { min: 0, max: 64 * 1024 ** 3 }),
  body_timeout_ms: ms("A request body not fully received this long after its headers gets 408 and the connection is closed.", 30_000),
  migration_limit: int("A stream whose worker dies or stalls after tokens were sent is re-sent, with the tokens so far, to another worker up to this many times (0 = never; chat streams without guided decoding, n > 1 or logprobs).", 3, { min: 0, max: 10 }),
  migration_max_tokens: int("No migration once a stream has sent this many tokens (the re-sent prompt grows with them).", 32_768, { min: 1, max: 10_000_000 }),
  migration_collect_min_tokens: int("A non-streamed chat request is streamed from the engine and assembled by herd, so it can migrate, only when its max_tokens is absent or at least this (0 = always); a shorter one goes to the engine as asked and, if its engine fails before answering, is re-run from scratch on another worker (up to migration_limit times, outside the retry budget).", 64, { min: 0, max: 10_000_000 }),
  migration_grace_ms: ms("On SIGTERM, requests still running at drain_timeout_ms migrate to other nodes' workers instead of being cut; herd keeps relaying them this much longer before it exits (0 = cut them at the deadline).", 30_000),
  engine_first_byte_timeout_ms: ms("A local engine's stream must send its response head within this (connect included; engines send it before the first token): else the worker is ejected and the request retried.", 5000),
});

/** A pipeline spec (router.pipeline and each P/D leg's): filters, their knobs, weighted scorers, a picker. */
function pipelineSpec(doc: string, filters: (typeof PIPELINE_FILTERS)[number][], scorers: { type: (typeof PIPELINE_SCORERS)[number]; weight: number }[], picker: (typeof PIPELINE_PICKERS)[number]) {
  return obj(doc, {
    filters: list(oneOf(PIPELINE_FILTERS, "A filter."), "Filters in order, each skipped when it would drop every worker (the router already keeps only ready workers of the model and role).", filters),
    overload: obj("SGLang-style imbalance guard: a worker is dropped when its load exceeds the least loaded one's by both thresholds.", {
      abs_threshold: num("Load (requests) above the least loaded worker's.", 32, { min: 0, max: 1_000_000 }),
      rel_threshold: num("Load as a multiple of the least loaded worker's.", 1.5, { min: 1, max: 1000 }),
    }),
    kv_headroom: obj("`kv-headroom` guard: a worker whose scraped KV cache usage is at or above this has no room for another request's blocks.", {
      max_kv_usage: num("Scraped KV usage (0..1) at or above which a worker is dropped.", 0.95, { min: 0, max: 1 }),
    }),
    scorers: list(
      obj("A weighted scorer.", {
        type: oneOf(
          PIPELINE_SCORERS,
          "`kv-cost`: Dynamo's cost; `load`: effective load in requests; `session`: minus the request's blocks on the session's last worker; `decode-load`: the worker's active KV blocks plus this request's.",
        ),
        weight: num("Multiplier of the scorer's cost.", 1, { min: 0, max: 1000 }),
      }),
      "Scorers whose weighted costs are summed per worker.",
      scorers,
      16,
    ),
    picker: oneOf(PIPELINE_PICKERS, "`softmax` (router.kv.temperature; 0 = cheapest), `min` (the cheapest), `lightest` (the cheapest, ties to lower KV usage), `power-of-two` (the lighter of two drawn at random), `random`, `round-robin` (per model, in worker-id order), `ring` (session ring with bounded load, router.session).", picker),
  });
}

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
  outlier: obj("Passive outlier detection (Envoy's): a worker or peer node that fails with a refused/reset connection or no answer head is ejected from routing at once.", {
    enabled: bool("Eject targets on failure evidence.", true),
    base_ejection_ms: ms("First ejection's length; each repeat doubles it. Afterwards one request probes the target.", 2000),
    max_ejection_ms: ms("Longest ejection; a target healthy this long starts again from the base.", 30_000),
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
    // `requests`, not Dynamo's `distinct`: a decode step reads every sequence's KV (the sim's step
    // cost, docs/references.md#timing-B.5), so a document shared by 3 in-flight questions is 3× the
    // decode work of one; counting it once made same-document requests pile onto one worker when
    // every worker held every document (issue 25, bench/routing-never-worse.ts).
    decode_load_model: oneOf(
      DECODE_LOAD_MODELS,
      "`requests`: the decode term counts the blocks of every in-flight request in full (each sequence's KV is read every step); `distinct`: a prefix shared by in-flight requests counts once and a request's blocks already active there are free (Dynamo's default).",
      "requests",
    ),
  }),
  prefix: obj("The `prefix` policy's memory of which prompt blocks it sent to which worker (no engine events needed).", {
    ttl_ms: ms("A remembered block counts as cached for this long after the last request that sent it (Dynamo: 120 s).", 120_000),
    max_blocks_per_worker: int("Remembered blocks per worker; the least recently sent are forgotten first.", 65_536, {
      min: 1,
      max: 16_777_216,
    }),
  }),
  pipeline: pipelineSpec("The `kv`/`prefix` pipeline: filters, then weighted scorers (costs in KV blocks, lower wins), then a picker.", ["overload"], [
    { type: "kv-cost", weight: 1 },
    { type: "session", weight: 0.5 },
  ], "softmax"),
  pd: obj("The pipelines that route a P/D request's two legs (src/pd): each leg is one routing decision over this router's load and KV index, explained stage by stage.", {
    // Prefill: Dynamo's cost (overlap credit against the blocks still to prefill, plus the worker's
    // active blocks), cheapest wins: a prefill worker that holds the prompt's prefix wins.
    prefill: pipelineSpec("The prefill leg (workers of role prefill): overlap and prefill load.", [], [{ type: "kv-cost", weight: 1 }], "min"),
    // Decode: room for the request's KV first (a guard), then the fewest active decode blocks,
    // ties to the lower KV usage.
    decode: pipelineSpec("The decode leg (workers of role decode; aggregated ones too when it prefills locally): KV headroom and decode load.", ["kv-headroom"], [{ type: "decode-load", weight: 1 }], "lightest"),
  }),
  predicted: obj("The `predicted` policy: each worker's TTFT and ITL for this request from the engine's step-cost model plus live queue, KV and overlap, corrected online; the worker meeting the SLO with the most headroom wins.", {
    // Defaults = the sim engine's (src/engine/sim/cost.ts, docs/references.md#timing-B.5); for a
    // real engine paste what `herd simulate --calibrate` fits.
    engine: obj("The engine's step cost: step_ms + max(weights_ms, token_ms × tokens) + pair_ms × prefill pairs + kv_token_ms × decoded context (`herd simulate --calibrate` fits these).", {
      step_ms: num("Per-step overhead, ms.", 1.5, { min: 0, max: 10_000 }),
      weights_ms: num("Minimum step time (weight read), ms.", 5.9, { min: 0, max: 10_000 }),
      token_ms: num("Matmul time per token in a step, ms.", 0.0232, { min: 0, max: 100 }),
      pair_ms: num("Prefill attention per (query, key) pair, ms.", 1.18e-6, { min: 0, max: 1 }),
      kv_token_ms: num("Decode KV read per context token, ms.", 5.3e-5, { min: 0, max: 1 }),
      request_ms: num("Engine API-server time per request before scheduling, ms.", 10, { min: 0, max: 60_000 }),
      max_num_batched_tokens: int("Token budget per step (vLLM --max-num-batched-tokens).", 8192, { min: 1, max: 1_048_576 }),
    }),
    slo: obj("Default SLO when the request sends no x-slo-ttft-ms / x-slo-itl-ms header; 0 = none.", {
      ttft_ms: ms("Time to first token objective, ms; 0 = none.", 0, 3_600_000),
      itl_ms: ms("Inter-token latency objective, ms; 0 = none.", 0, 60_000),
    }),
    models: list(
      obj("One model's default SLO.", {
        model: str("A models[].name.", undefined, { nonEmpty: true }),
        ttft_ms: ms("Time to first token objective, ms; 0 = none.", 0, 3_600_000),
        itl_ms: ms("Inter-token latency objective, ms; 0 = none.", 0, 60_000),
      }),
      "Per-model default SLOs, ahead of `slo`.",
      [],
      1000,
    ),
    correction_ewma: num("Weight of a new measured/predicted TTFT sample in a worker's correction factor; 0 = no online refinement.", 0.1, { min: 0, max: 1 }),
    correction_max: num("A worker's correction factor stays within [1/max, max].", 4, { min: 1, max: 1000 }),
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
  aliases: list(
    str("Another name clients may send for this model.", undefined, { nonEmpty: true }),
    "More served names for this model (vLLM --served-model-name takes several): listed in /v1/models and accepted as `model`; engines see `name`.",
    [],
    64,
  ),
  lora_adapters: list(
    obj("A LoRA adapter served beside the base model (vLLM --lora-modules): clients send its name as `model`.", {
      name: str("The adapter's model name clients send.", undefined, { nonEmpty: true }),
      path: str("Where engines load it from.", undefined, { nonEmpty: true }),
      on_demand: bool("Loaded at run time where requests need it (vLLM/sim engines: /v1/load_lora_adapter), unloaded when idle (frontend.lora); false = loaded at engine start.", false),
    }),
    "LoRA adapters of this model. Their requests run on the model's engines and hash their KV blocks with the adapter's name (vLLM's extra keys), so they never get the base model's cache credited.",
    [],
    256,
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

const SIZE_PATTERN = "^\\s*\\d+(\\.\\d+)?\\s*([KMGT]i?B|B)?\\s*$";
const size = (doc: string) => str(doc, undefined, { check: checkSize, pattern: SIZE_PATTERN });

const kvIngest = obj("Engine KV event ingest (src/kv/README.md \"Ingest on worker threads\"). Restart to change.", {
  threads: int("Ingest threads: 0 = on the daemon's event loop; N = engine workers' event streams (sockets, sequencing, decoding, hashing, engine-hash maps) spread over N worker threads, the index updated on the event loop from their ops.", 0, { min: 0, max: 16 }),
  max_inflight_mib: int("Index ops one thread may have sent and not yet seen applied; beyond it the thread stops reading its sockets until the event loop catches up (counted in herd_kv_ingest_stall_seconds_total).", 16, { min: 1, max: 1024 }),
});

const kvTier = obj("The host's KV cache tier: CPU shared memory, SSD, a Redis-protocol server, shared directories (docs: src/tier/README.md).", {
  cpu: nullable(
    obj("CPU tier: shared-memory segments carved into slots.", {
      size: size("Capacity (e.g. 64GiB); must fit the free space of the file system at `path` and the unit's MemoryMax."),
      path: str("Directory of the segment files (tmpfs).", "/dev/shm/herd", { nonEmpty: true }),
    }),
    "CPU tier; null = none.",
  ),
  ssd: nullable(
    obj("SSD tier: one file per object; the catalog (SQLite) lives here too.", {
      size: size("Capacity (e.g. 1TiB); must fit the free space of the file system at `path`."),
      path: str("Directory on the SSD.", undefined, { nonEmpty: true }),
    }),
    "SSD tier; null = none.",
  ),
  resp: nullable(
    obj("Redis-protocol (RESP2) server for LMCache (`resp://`, `redis://`).", {
      listen: str("HOST:PORT; a non-loopback host requires password_file.", "127.0.0.1:6390", {
        check: checkListen,
        pattern: "^(\\[[0-9A-Fa-f:.]+\\]|[^:\\s\\[\\]]+):[0-9]{1,5}$",
      }),
      password_file: str("File holding the AUTH password; \"\" = no AUTH (loopback only).", ""),
      peer_fetch_max: int("Local GET/EXISTS misses looked up on other cluster nodes at once (peer fetch); beyond it a miss is answered at once; 0 = never ask.", 64, { min: 0, max: 4096 }),
      peer_fetch_timeout_ms: ms("How long one other node may take to answer a peer fetch before it counts as a miss.", 500, 60_000),
      key_max_bytes: int("Longest key accepted; a longer one is refused (LMCache keys are < 300 bytes).", 1024, { min: 16, max: 65_536 }),
      output_total_max_bytes: int("Replies queued for all clients together before none executes more commands (slow readers of large GETs).", 256 * 1024 * 1024, { min: 1 << 20, max: 2 ** 40 }),
      idle_timeout_ms: ms("A connection with no input or output progress this long is closed; 0 = never (Redis' `timeout 0`).", 0),
      auth_timeout_ms: ms("With password_file: a connection that has not authenticated this long after connecting is closed; 0 = never.", 10_000),
      direct_recv: bool("Read a large SET value from the socket straight into its shared-memory slot (libc recv through bun:ffi; src/tier/resp/direct-recv.ts) instead of through Bun's receive buffer and a copy. Where it is not available (not Linux, no libc.so.6 or bun:ffi) the tier logs why and uses Bun's socket reads; TLS connections always do. false = Bun's socket reads only.", true),
    }),
    "RESP server; null = none.",
  ),
  thread: oneOf(["worker", "main"] as const, "`worker`: the tier (RESP server, store, catalog) runs on its own thread, so its work cannot delay routing, /health or cluster heartbeats (src/tier/README.md); `main`: on the daemon's event loop.", "worker"),
  shared_dirs: list(
    obj("A directory engines write KV files into (vLLM fs tier `root_dir`, LMCache `fs://`).", {
      path: str("The directory.", undefined, { nonEmpty: true }),
      size: size("Capacity; herd deletes the coldest files above it."),
    }),
    "Directories herd indexes and bounds.",
    [],
    64,
  ),
});

// Defaults are the simulation's (src/simulate/planner-day/compare.ts DEFAULT_PLANNER, DEFAULT_POOL), where the
// day-long comparison against static provisioning measured them.
const FLOOR_PATTERN = "^([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-4]):[0-5][0-9]=[0-9]{1,4}$";
const plannerPool = obj("A pool: the engines of one engines[] entry, scaled together between min and max.", {
  engine: int("Index of the engines[] entry (kind sim, vllm, sglang, trtllm or command) this pool scales.", undefined, { min: 0, max: 999 }),
  min: int("Fewest engines (0 = scale to zero when idle).", 0, { min: 0, max: 1024 }),
  max: int("Most engines.", 4, { min: 1, max: 1024 }),
  prefill_tokens_per_s: num("One engine's prompt tokens/s at the SLO (herd bench / herd simulate --calibrate).", 40_000, { min: 1, max: 1e9 }),
  decode_tokens_per_s: num("One engine's decode tokens/s at the SLO.", 3_000, { min: 1, max: 1e9 }),
  can_sleep: bool("Idle engines sleep first (vLLM sleep mode: wake in seconds), then stop after sleep_to_stop_ms.", false),
  floors: list(str("`HH:MM-HH:MM=N`: at least N engines in that local time range (may wrap midnight).", undefined, {
    pattern: FLOOR_PATTERN,
    check: (v) => (new RegExp(FLOOR_PATTERN).test(v) ? null : "expected HH:MM-HH:MM=N, e.g. 08:00-20:00=2"),
  }), "Time-of-day floors.", [], 48),
  pin: int("An operator's pin: exactly this many engines; -1 = none.", -1, { min: -1, max: 1024 }),
});

const planner = obj("Scale engines from herd's own signals, down to zero at night (issue 15). Off by default.", {
  enabled: bool("Run the planner on this node.", false),
  dry_run: bool("Log the planner's actions instead of taking them.", false),
  tick_ms: ms("How often the planner decides (a held request also wakes it at once).", 5_000),
  utilization_target: num("Share of an engine's capacity (as calibrated at the SLO) to plan for when scaling up; above 1 counts on the pool's gain.", 1.1, { min: 0.05, max: 2 }),
  down_headroom: num("Scale down only when one fewer engine stays under this share of the target.", 0.95, { min: 0.05, max: 1 }),
  stable_window_ms: ms("Window of the demand mean that scaling reads.", 60_000),
  panic_window_ms: ms("Short window that counts when demand doubles (Knative's panic mode).", 6_000),
  down_window_ms: ms("Demand must allow one fewer engine this long before one is removed.", 300_000),
  down_step_ms: ms("At most one removal per pool per this interval.", 120_000),
  up_hold_ms: ms("No removal this soon after an addition.", 30_000),
  idle_to_sleep_ms: ms("A pool idle this long sleeps (or stops) down to its floor.", 300_000),
  sleep_to_stop_ms: ms("An engine asleep this long is stopped.", 1_800_000),
  gpu_budget: int("GPUs the planner may hold on this node; 0 = every GPU of the host.", 0, { min: 0, max: 4096 }),
  hold_max: int("Requests held while their pool has no ready engine; beyond it 503 with Retry-After.", 256, { min: 0, max: 1_000_000 }),
  hold_max_bytes: int("Body bytes of held requests; beyond it 503 with Retry-After.", 64 * 1024 * 1024, { min: 0, max: 1024 ** 4 }),
  hold_timeout_ms: ms("A request held longer gets 503 with Retry-After.", 120_000),
  pools: list(plannerPool, "Pools the planner scales; engines[] entries not listed keep their count.", [], 1000),
  // SLA mode (src/planner/sla.ts): Dynamo's throughput-based SLA planner on herd's signals.
  slo: nullable(
    obj("SLA mode: size each pool (prefill, decode, aggregated) for mean TTFT and ITL targets from the capacity model (the engines' step cost) and the predicted load, refined online from the measured TTFT/ITL.", {
      ttft_ms: int("Mean time to first token to plan for, ms.", 1000, { min: 1, max: 3_600_000 }),
      itl_ms: int("Mean inter-token latency to plan for, ms.", 50, { min: 1, max: 60_000 }),
      profile: str("A `herd simulate --calibrate … --save` file: the engines' step cost; \"\" = a sim entry's own flags, else the built-in figures (Qwen3-8B BF16 on one H100 under vLLM).", ""),
      horizon_ms: ms("Plan for the load predicted this far ahead (a cold start and a tick).", 60_000, 3_600_000),
      correction_ewma: num("Weight of a new measured/expected sample in the TTFT and ITL correction factors; 0 = no online refinement.", 0.2, { min: 0, max: 1 }),
      correction_max: num("The correction factors stay within [1/max, max].", 3, { min: 1, max: 100 }),
    }),
    "SLA mode; null = size from the pools' capacity figures × utilization_target.",
  ),
});

/** The embedded demo: used when a config sets neither `models` nor `engines` (see resolve.ts). */
export const DEMO_MODEL = "herd-sim";
const demoModels = () => [{ name: DEMO_MODEL, path: DEMO_MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "" as const, aliases: [], lora_adapters: [] }];
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

// Cluster timings are not keys: file and peers remove a dead node within 5 s and elect within a few
// seconds by construction (src/cluster/backend.ts, election.ts); etcd's bound is its lease TTL.
const cluster = obj("Multi-node membership and leader election (see src/cluster/README.md).", {
  discovery: oneOf(DISCOVERY_KINDS, "How nodes find each other and elect a leader: `file` (a shared directory), `peers` (seed addresses, gossip, Raft-style election), `etcd`.", "file"),
  token: str("Shared secret every node sends on the peer API (Bearer). Empty = no token: peers must be on loopback, and a cluster other than the default one-node `file` cluster under node.data_dir refuses to start on a non-loopback address.", ""),
  token_file: str("File whose first line is the token (used when `token` is empty).", ""),
  listen: str("HOST:PORT of a separate peer-API listener (its port is this node's peer address with node.advertise); empty = the peer API is on frontend.listen. Required with `tls`.", "", {
    check: (v) => (v === "" || parseHostPort(v) ? null : `expected HOST:PORT, got ${JSON.stringify(v)}`),
  }),
  tls: obj("Mutual TLS for the peer API (all three files or none): every node presents its certificate and accepts only peers whose certificate the CA signed. Certificates need the node's node.advertise address as a subjectAltName.", {
    cert: str("PEM certificate of this node (server and client).", ""),
    key: str("PEM private key of `cert`.", ""),
    ca: str("PEM CA bundle that signs every node's certificate.", ""),
  }),
  file: obj("`file` discovery.", {
    dir: str("Directory of heartbeat and lease records (shared by all nodes); empty = <node.data_dir>/cluster/dir.", ""),
  }),
  peers: obj("`peers` discovery.", {
    seeds: list(
      str("HOST:PORT of a voting member's peer API.", undefined, { check: (v) => (parseHostPort(v) ? null : `expected HOST:PORT, got ${JSON.stringify(v)}`) }),
      "Voting members (identical list on every host; 1, 3 or 5). Other nodes join through any of them as non-voters.",
      [],
      64,
    ),
  }),
  etcd: obj("`etcd` discovery (etcd v3 JSON gateway).", {
    endpoints: list(str("etcd client URL.", undefined, { check: checkUrl }), "etcd client URLs (http:// or https://).", [], 16),
    prefix: str("Key prefix for this cluster's keys.", "/herd", { nonEmpty: true, check: (v) => (v.startsWith("/") ? null : "expected a prefix starting with /") }),
    lease_ttl_s: int("Lease TTL: a dead node (or leader) is gone from etcd after this.", 10, { min: 2, max: 3600 }),
  }),
  peer_first_byte_timeout_ms: ms("A peer node must answer a forwarded leg within this (it sends its head at once and a heartbeat byte while its engine works): else it is ejected and the request retried elsewhere.", 1000),
});

// P/D (issue 13). min_prefill_tokens is a non-cached-token threshold like llm-d's P/D decider's
// (llm-d-inference-scheduler README-PD-SLO.md: "non-cached suffix < pdThreshold" → decode only);
// 512 is the example. `recompute` keeps a decode engine answering when a transfer fails
// (vLLM's own default is `fail`, vllm/config/kv_transfer.py).
const pd = obj("Prefill/decode disaggregation across engines with role prefill and decode.", {
  min_prefill_tokens: int("Below this uncached prompt length (tokens) a request skips the prefill pool and prefills on its decode worker.", 512, { min: 0, max: 10_000_000 }),
  nixl_metadata: oneOf(NIXL_METADATA_MODES, "`herd`: herd serves the NIXL TCPStore metadata service and passes NIXL_TCPSTORE_ENDPOINT(S) to its engines; `none`: engines find peers on their own.", "herd"),
  nixl_metadata_idle_timeout_ms: ms("A NIXL metadata client silent this long is closed; 0 = never (the default: an agent keeps one quiet connection for its life, and its keys go with it).", 0),
  nixl_metadata_host: str("Address herd's NIXL metadata store listens on. Its clients are this host's engines, so loopback; another address (engines in a bridged container network) exposes an unauthenticated store to whoever reaches it.", "127.0.0.1", { nonEmpty: true, check: checkAdvertise }),
  kv_load_failure_policy: oneOf(KV_LOAD_FAILURE_POLICIES, "vLLM decode engines' kv_load_failure_policy: `fail` errors the request (herd retries elsewhere), `recompute` prefills locally.", "recompute"),
  prefill_queue_max: int("A prefill worker with this many requests waiting for their first token counts as saturated; when all are, requests prefill on their decode worker.", 8, { min: 1, max: 100_000 }),
});

// Decision records (issue 23): one JSON line per finished request, rotated by size so the disk
// use is bounded by max_bytes × (files + 1); `herd simulate --trace` replays them.
const decisionLog = obj("One JSON line per finished request (model, prompt length, cached tokens, chosen worker and its cost terms, outcome, TTFT/ITL/E2E) in a rotating file, for `herd simulate --trace`.", {
  path: str("File to append to; empty = off. Relative paths are under node.data_dir.", ""),
  max_bytes: int("Rotate when the file would grow beyond this (FILE → FILE.1 → … → FILE.<files>).", 64 * 1024 * 1024, { min: 4096, max: 1024 ** 4 }),
  files: int("Rotated files kept besides the current one.", 3, { min: 0, max: 100 }),
  buffer_bytes: int("Bytes of lines buffered in memory before a write (written at least every second either way).", 64 * 1024, { min: 1024, max: 64 * 1024 * 1024 }),
});

// OpenTelemetry (issue 23). Every empty key falls back to the standard variable of the OTel
// specification (opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/), then
// the SDK's default, so a node configured only by OTEL_* variables behaves like any OTel service.
const tracing = obj("OpenTelemetry traces of requests, exported as OTLP over HTTP. Off by default (no SDK loaded).", {
  enabled: bool("Trace requests: admission, preprocessing, routing, each attempt and leg, the remote hop; an incoming W3C traceparent is continued.", false),
  endpoint: str("OTLP/HTTP base URL; spans go to <endpoint>/v1/traces. Empty = OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318.", "", {
    check: (v) => (v === "" ? null : checkUrl(v)),
  }),
  protocol: oneOf(TRACING_PROTOCOLS, "OTLP encoding: `http/protobuf` or `http/json`. Empty = OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.", ""),
  service_name: str("service.name of herd's spans. Empty = OTEL_SERVICE_NAME, else herd.", ""),
  sampler: oneOf(TRACING_SAMPLERS, "Sampler. Empty = OTEL_TRACES_SAMPLER, else parentbased_always_on (a caller's sampled flag is obeyed).", ""),
  sampler_arg: num("Sampling ratio of the traceidratio samplers; below 0 = OTEL_TRACES_SAMPLER_ARG, else 1.", -1, { min: -1, max: 1 }),
  engines: bool("vLLM engines export their own spans to the same endpoint (--otlp-traces-endpoint, http/protobuf); herd sends them the traceparent of each attempt.", true),
});

export const configSpec = obj("herd configuration (one file per node).", {
  seed: int("The run's seed: every random choice (routing ties and draws, reconnect jitter) derives from it, so one seed replays a run; HERD_SEED overrides it; 0 = drawn at start (and logged).", 0, { min: 0, max: 2 ** 32 - 1 }),
  node,
  frontend,
  router,
  models: list(modelEntry, "Models served. Default (with no `engines` either): one simulated model `herd-sim`.", demoModels, 1000),
  engines: list(engineEntry, "Engines. Default (with no `models` either): two `sim` engines serving `herd-sim`.", demoEngines, 1000),
  supervisor,
  pd,
  cluster,
  kv_ingest: kvIngest,
  kv_tier: kvTier,
  planner,
  decision_log: decisionLog,
  tracing,
});

// Compile-time guard: the schema resolves to exactly the Config contract.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const schemaMatchesTypes: Equal<Infer<typeof configSpec>, Config> = true;
void schemaMatchesTypes;
