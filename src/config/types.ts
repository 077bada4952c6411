// The resolved configuration: every key has a value after defaults are applied. This file is the
// contract between config parsing (src/config) and every component that reads config. Names are the
// YAML keys (snake_case, units last) so a config finding and the code speak the same words.

export const POLICIES = ["round-robin", "random", "power-of-two", "least-loaded", "session", "kv", "prefix", "predicted", "approx", "prefixaware"] as const;
export type PolicyName = (typeof POLICIES)[number];

export const ENGINE_KINDS = ["sim", "vllm", "sglang", "trtllm", "command", "external"] as const;
export type EngineKind = (typeof ENGINE_KINDS)[number];

/** vLLM's `--prefix-caching-hash-algo` values (vllm/config/cache.py PrefixCachingHashAlgo); "" = engine default. */
export const PREFIX_CACHING_HASH_ALGOS = ["", "sha256", "sha256_cbor", "xxhash", "xxhash_cbor"] as const;
export type PrefixCachingHashAlgo = (typeof PREFIX_CACHING_HASH_ALGOS)[number];

export const ROLES = ["aggregated", "prefill", "decode"] as const;
export type Role = (typeof ROLES)[number];

export const NIXL_METADATA_MODES = ["herd", "none"] as const;
export type NixlMetadataMode = (typeof NIXL_METADATA_MODES)[number];

export const KV_LOAD_FAILURE_POLICIES = ["fail", "recompute"] as const;
export type KvLoadFailurePolicy = (typeof KV_LOAD_FAILURE_POLICIES)[number];

/** Prefill/decode disaggregation (engines with role prefill/decode); issue 13's public contract. */
export interface PdConfig {
  /** Below this uncached prompt length (tokens) the prefill pool is skipped. */
  min_prefill_tokens: number;
  /** `herd`: herd serves NIXL's TCPStore metadata and passes NIXL_TCPSTORE_ENDPOINT(S) to engines. */
  nixl_metadata: NixlMetadataMode;
  /** Address the NIXL metadata store listens on (default loopback: its clients are this host's engines). */
  nixl_metadata_host: string;
  /** A NIXL metadata client silent this long is closed; 0 = never. */
  nixl_metadata_idle_timeout_ms: number;
  /** vLLM's kv_load_failure_policy for decode engines: `fail` errors the request, `recompute` prefills locally. */
  kv_load_failure_policy: KvLoadFailurePolicy;
  /** A prefill worker with this many requests waiting for their first token counts as saturated. */
  prefill_queue_max: number;
}

export interface NodeConfig {
  /** Stable node name; defaults to the host name. */
  name: string;
  /** Address other nodes use to reach this one; defaults to 127.0.0.1. */
  advertise: string;
  /** Logs, state and (later) the KV tier live here. */
  data_dir: string;
}

export interface ApiKeyEntry {
  key: string;
  key_file: string;
  name: string;
  rpm: number;
  tpm: number;
  concurrency: number;
  priority: number;
}

export interface QueueConfig {
  worker_slots: number;
  max_waiting: number;
  timeout_ms: number;
  aging_ms: number;
  /** Per worker: slots held back for tenants under their fair share (src/frontend/fair-queue.ts). */
  headroom_slots: number;
}

export interface FrontendConfig {
  /** HOST:PORT of the OpenAI-compatible listener (also serves /admin and /metrics). */
  listen: string;
  /** Bearer keys accepted on /v1/*; empty = no auth. */
  /** Bare keys, or tenants with limits (src/frontend/tenants.ts). */
  api_keys: (string | ApiKeyEntry)[];
  queue: QueueConfig;
  lora: { max_per_engine: number; idle_ms: number; spread_in_flight: number };
  /** Optional TLS on the listener: cert + key (PEM paths); ca = client certificates required. "" = off. */
  tls: { cert: string; key: string; ca: string };
  /** Bytes of /v1/responses conversations kept for previous_response_id. */
  responses_store_bytes: number;
  /** Bearer token for /admin from non-loopback clients; empty = admin is loopback-only. */
  admin_token: string;
  /** Request bodies above this get 413. */
  max_body_bytes: number;
  /** Admitted requests beyond this get 429 (bounded queue in front of the router). */
  max_in_flight: number;
  /** A stream with no first token after this is aborted (hung engine). */
  first_token_timeout_ms: number;
  /** A stream with no bytes for this long after the first token is aborted. */
  idle_timeout_ms: number;
  /** On SIGTERM, admitted streams get this long to finish before engines stop. */
  drain_timeout_ms: number;
  /** On SIGTERM with peers: leave routing first, serve arrivals this long, then drain. */
  leave_grace_ms: number;
  /** Chat requests with more messages than this get 400 (bounds per-request template work). */
  max_messages: number;
  /** Requests whose prompt text (all messages, or the prompt) exceeds this many characters get 400. */
  max_prompt_chars: number;
  /** Bodies with more JSON values (objects, arrays, strings, numbers…) than this get 400 before they are parsed on the event loop. */
  max_json_values: number;
  /** Bytes of request bodies being read and checked at once; beyond it a request gets 503 (bounds herd's memory for bodies). */
  max_body_bytes_in_flight: number;
  /** Who may read /metrics on a non-loopback listener: anyone, admin-token holders, or loopback clients only. */
  metrics: "open" | "token" | "loopback";
  /** A request body not fully received this long after its headers gets 408 (issue 10). */
  body_timeout_ms: number;
  /** Re-sends of a stream after its worker failed mid-stream (src/request/migrate.ts); 0 = never. */
  migration_limit: number;
  /** No migration past this many tokens sent. */
  migration_max_tokens: number;
  /** A non-streamed chat request is collected as a stream (src/request/collect.ts) only when its max_tokens is absent or ≥ this. */
  migration_collect_min_tokens: number;
  /** On SIGTERM: requests migrated at the drain deadline are relayed this much longer before exit. */
  migration_grace_ms: number;
  /** A local engine's stream must send its response head within this (src/request/http-upstream.ts). */
  engine_first_byte_timeout_ms: number;
}

export interface RetryConfig {
  /** Extra attempts on another worker for failures before the first byte. */
  attempts: number;
  /** Retries allowed as a fraction of recent requests (Envoy-style budget). */
  budget_ratio: number;
  /** Retries always allowed regardless of the ratio, so a quiet service can still retry. */
  min_retries_per_window: number;
}

export interface SessionPolicyConfig {
  /** Request header carrying the session id. */
  header: string;
  /** Bounded-load factor: a worker is skipped when its load exceeds factor × mean load + 1. */
  load_factor: number;
  /** Virtual nodes per worker on the hash ring. */
  virtual_nodes: number;
}

/** Credit per overlapping block, by where the engine holds it (Dynamo: GPU 1.0, host 0.75, disk 0.25). */
export interface OverlapCreditConfig {
  gpu: number;
  cpu: number;
  disk: number;
}

/** Knobs of the KV-aware cost (Dynamo's form) shared by the `kv` and `prefix` policies. */
export interface KvPolicyConfig {
  /** Weight of the prefill term (blocks still to compute) against the decode term (active blocks). */
  prefill_load_scale: number;
  overlap_credit: OverlapCreditConfig;
  /** 0 = cheapest worker (ties random); > 0 = softmax over min-max normalised cost. */
  temperature: number;
  /** `kv` only: remember each decision's blocks this long as predicted GPU overlap until the engine's events arrive; 0 = off. */
  predicted_ttl_ms: number;
  /** `none`: a prompt counts in full until its first token; `progress`: minus what the worker has computed since dispatch, at its learned prefill rate. */
  prefill_load_model: PrefillLoadModel;
  /** `requests`: the decode term counts each in-flight request's blocks in full; `distinct`: a prefix shared by several counts once (Dynamo). */
  decode_load_model: DecodeLoadModel;
}

/** The `prefix` policy's memory of which blocks it sent where (no engine events). */
export interface PrefixPolicyConfig {
  /** A remembered block counts as cached for this long after the last request that sent it. */
  ttl_ms: number;
  /** Remembered blocks per worker; the least recently sent are forgotten first. */
  max_blocks_per_worker: number;
}

export const PIPELINE_FILTERS = ["healthy", "model", "role", "overload", "kv-headroom"] as const;
export type PipelineFilterName = (typeof PIPELINE_FILTERS)[number];
export const PIPELINE_SCORERS = ["kv-cost", "load", "session", "decode-load", "overlap", "prefix-share", "queue", "kv-utilization", "no-hit-lru"] as const;
export type PipelineScorerName = (typeof PIPELINE_SCORERS)[number];
export const PIPELINE_PICKERS = ["softmax", "min", "lightest", "power-of-two", "random", "round-robin", "ring"] as const;
/** How the kv-cost prefill term counts prompts a worker is already computing (Dynamo: router_prefill_load_model). */
export const PREFILL_LOAD_MODELS = ["none", "progress"] as const;
export type PrefillLoadModel = (typeof PREFILL_LOAD_MODELS)[number];
/** How the kv-cost decode term counts blocks of in-flight requests (Dynamo: distinct, "assume KV reuse"). */
export const DECODE_LOAD_MODELS = ["requests", "distinct"] as const;
export type DecodeLoadModel = (typeof DECODE_LOAD_MODELS)[number];
export type PipelinePickerName = (typeof PIPELINE_PICKERS)[number];

export interface PipelineScorerConfig {
  type: PipelineScorerName;
  weight: number;
}

/** SGLang-style imbalance guard: a worker is dropped when it is over both thresholds above the least loaded. */
export interface OverloadGuardConfig {
  /** Load (requests) above the least loaded worker's. */
  abs_threshold: number;
  /** Load as a multiple of the least loaded worker's. */
  rel_threshold: number;
}

/** The `kv-headroom` guard: a worker whose scraped KV usage leaves no room for more decode blocks is dropped. */
export interface KvHeadroomConfig {
  /** Scraped KV usage (0..1) at or above which a worker is dropped. */
  max_kv_usage: number;
}

/** A pipeline: filters, then weighted scorers (costs in blocks), then a picker (src/router/pipeline). */
export interface PipelineConfig {
  filters: PipelineFilterName[];
  overload: OverloadGuardConfig;
  kv_headroom: KvHeadroomConfig;
  scorers: PipelineScorerConfig[];
  picker: PipelinePickerName;
}

/** Passive outlier detection (src/router/outlier.ts). */
export interface OutlierConfig {
  enabled: boolean;
  /** First ejection's length; each repeat doubles it. */
  base_ejection_ms: number;
  /** Longest ejection, and how long a target must stay healthy to start again from the base. */
  max_ejection_ms: number;
}

export interface KvIngestConfig {
  /** 0 = streams on the event loop; N = on N ingest threads. */
  threads: number;
  /** Per thread: index ops sent and not yet applied before the thread waits. */
  max_inflight_mib: number;
}

export interface RouterConfig {
  policy: PolicyName;
  /** Seed for routing randomness (ties, random, power-of-two); 0 = from time. */
  seed: number;
  session: SessionPolicyConfig;
  retry: RetryConfig;
  outlier: OutlierConfig;
  /** How often engine /metrics are scraped to correct herd's own load accounting. */
  metrics_scrape_interval_ms: number;
  kv: KvPolicyConfig;
  prefix: PrefixPolicyConfig;
  pipeline: PipelineConfig;
  /** The P/D legs' pipelines (src/pd): each leg is routed by its own preset over the same router. */
  pd: PdLegsConfig;
  /** The `predicted` policy: TTFT/ITL per worker from the engine's step-cost model, against the request's SLO. */
  predicted: PredictedPolicyConfig;
}

/** The engine's step-cost figures (`herd simulate --calibrate` prints them; src/engine/sim/cost.ts). */
export interface EngineCostConfig {
  step_ms: number;
  weights_ms: number;
  token_ms: number;
  pair_ms: number;
  kv_token_ms: number;
  request_ms: number;
  /** The engine's token budget per step (vLLM --max-num-batched-tokens). */
  max_num_batched_tokens: number;
}

/** A latency objective; 0 = none. */
export interface SloConfig {
  ttft_ms: number;
  itl_ms: number;
}

export interface ModelSloConfig extends SloConfig {
  model: string;
}

export interface PredictedPolicyConfig {
  engine: EngineCostConfig;
  /** Default SLO when the request sends no x-slo-ttft-ms / x-slo-itl-ms header. */
  slo: SloConfig;
  /** Per-model defaults, ahead of `slo`. */
  models: ModelSloConfig[];
  /** Weight of a new measured/predicted sample in a worker's correction factor (EWMA). */
  correction_ewma: number;
  /** The correction factor is clamped to [1/max, max]. */
  correction_max: number;
}

/** The pipelines that choose a P/D request's prefill worker and its decode worker. */
export interface PdLegsConfig {
  prefill: PipelineConfig;
  decode: PipelineConfig;
}

export interface ModelConfig {
  /** The model name clients send (served model name). */
  name: string;
  /** What engines load (HF repo id or local path); defaults to `name`. */
  path: string;
  /** Directory with tokenizer.json (+ tokenizer_config.json); empty = built-in fallback (sim only). */
  tokenizer: string;
  /** KV block size in tokens; must match the engines'. */
  block_size: number;
  /** Context window passed to engines as --max-model-len; 0 = engine default. */
  max_model_len: number;
  /** vLLM engines' prefix-caching block hash (--prefix-caching-hash-algo); "" = engine default. Same for every engine of the model. */
  prefix_caching_hash_algo: PrefixCachingHashAlgo;
  /** LoRA adapters served beside the base model; a request names one as its `model`. */
  /** More names clients may send for this model (listed in /v1/models). */
  aliases: string[];
  lora_adapters: { name: string; path: string; on_demand: boolean }[];
}

export interface KvEventsEndpoint {
  endpoint: string;
  replay_endpoint: string;
  topic: string;
}

export interface EngineConfig {
  kind: EngineKind;
  /** A models[].name. */
  model: string;
  /** Identical engines from this entry. */
  count: number;
  role: Role;
  /** GPU ids for this entry; with count > 1 they are split evenly, in order, across the engines. */
  gpus: number[];
  /** Host the engine binds to (and herd connects to). */
  host: string;
  /** First engine's port; 0 = allocate from supervisor.port_range_start. Engine i gets port + i. */
  port: number;
  /** Extra command-line arguments appended to the generated command line. */
  args: string[];
  env: Record<string, string>;
  /** Full argv for kind `command` ({port}, {model}, {host} are substituted). */
  command: string[];
  /** Base URL for kind `external`. */
  url: string;
  /** KV event endpoints for kind `external` (and to override the generated ones). */
  kv_events: KvEventsEndpoint | null;
  /** Health path polled before the worker takes traffic. */
  health_path: string;
  /** vLLM --gpu-memory-utilization (share of each GPU's total memory); 0 = engine default. */
  gpu_memory_utilization: number;
  /** Allow this entry's engines to share a GPU with another engine (else over-subscription is an error). */
  share_gpu: boolean;
}

export interface SupervisorConfig {
  /** Ports for engines with port 0 are allocated upwards from here. */
  port_range_start: number;
  health_interval_ms: number;
  health_timeout_ms: number;
  /** Consecutive failed probes before a ready worker is taken out of rotation. */
  unhealthy_threshold: number;
  /** An engine not healthy within this is killed and restarted (model load can be slow). */
  startup_timeout_ms: number;
  restart_backoff_initial_ms: number;
  restart_backoff_max_ms: number;
  /** Consecutive crashes (without staying up for restart_reset_ms) before the worker is `failed`. */
  max_restarts: number;
  /** An engine up this long resets its crash count. */
  restart_reset_ms: number;
  /** SIGTERM → SIGKILL grace when stopping an engine. */
  stop_timeout_ms: number;
  /** Lines of engine output kept in memory per engine (full logs go to data_dir/logs). */
  log_tail_lines: number;
  /** PYTHONHASHSEED given to every Python engine (identical across a model's engines). */
  python_hash_seed: number;
}

export const DISCOVERY_KINDS = ["file", "peers", "etcd"] as const;
export type DiscoveryKind = (typeof DISCOVERY_KINDS)[number];

export interface ClusterConfig {
  /** file | peers | etcd. */
  discovery: DiscoveryKind;
  /** Shared secret for the peer API (Bearer); empty = none (then loopback only). */
  token: string;
  /** File holding the token (first line); used when `token` is empty. */
  token_file: string;
  /** HOST:PORT of a separate peer-API listener; "" = on frontend.listen. Required with `tls`. */
  listen: string;
  /** Mutual TLS for the peer API: PEM files; all "" = plain HTTP. */
  tls: { cert: string; key: string; ca: string };
  file: {
    /** Directory of heartbeat and lease records; empty = <node.data_dir>/cluster/dir. */
    dir: string;
  };
  peers: {
    /** HOST:PORT of the voting members (identical on every host, odd count). */
    seeds: string[];
  };
  etcd: {
    endpoints: string[];
    prefix: string;
    lease_ttl_s: number;
  };
  /** A peer must answer a forwarded leg (head, then heartbeats) within this. */
  peer_first_byte_timeout_ms: number;
}

export interface KvTierMediumConfig {
  /** Capacity, e.g. "64GiB" (see checks.ts parseSize). */
  size: string;
  path: string;
}

export interface KvTierConfig {
  /** Shared-memory CPU tier; null = none. */
  cpu: KvTierMediumConfig | null;
  /** SSD tier (files under path); null = none. */
  ssd: KvTierMediumConfig | null;
  /** Redis-protocol (RESP2) server for LMCache's resp:// and redis:// clients; null = none. */
  /** `worker`: the tier runs on its own thread; `main`: on the daemon's event loop. */
  thread: "worker" | "main";
  resp: {
    listen: string;
    password_file: string;
    peer_fetch_max: number;
    peer_fetch_timeout_ms: number;
    key_max_bytes: number;
    output_total_max_bytes: number;
    idle_timeout_ms: number;
    auth_timeout_ms: number;
    /** Large SET values read from the socket straight into their tier slot (bun:ffi recv). */
    direct_recv: boolean;
  } | null;
  /** Directories engines write KV files into (vLLM fs tier, LMCache fs://); herd bounds their size. */
  shared_dirs: { path: string; size: string }[];
}

export interface Config {
  /** The run's seed (0 = drawn at start); src/core/seed.ts. */
  seed: number;
  node: NodeConfig;
  frontend: FrontendConfig;
  router: RouterConfig;
  models: ModelConfig[];
  engines: EngineConfig[];
  supervisor: SupervisorConfig;
  pd: PdConfig;
  /** Multi-node membership and leader election (src/cluster). */
  cluster: ClusterConfig;
  /** Engine KV event ingest: on the event loop or on worker threads (src/kv/threaded-ingest.ts). */
  kv_ingest: KvIngestConfig;
  /** The host's KV cache tier (src/tier); all null/empty = off. */
  kv_tier: KvTierConfig;
  /** The planner (issue 15): scale engines of the listed engines[] entries from herd's own signals. */
  planner: PlannerSectionConfig;
  /** Decision records in a rotating file (src/request/record-file.ts); path "" = off. */
  decision_log: DecisionLogConfig;
  /** OpenTelemetry traces (issue 23); off by default. */
  tracing: TracingConfig;
}

export interface DecisionLogConfig {
  path: string;
  max_bytes: number;
  files: number;
  buffer_bytes: number;
}

/** OTLP over HTTP only (herd bundles no gRPC stack); "" = OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else http/protobuf. */
export const TRACING_PROTOCOLS = ["", "http/protobuf", "http/json"] as const;
/** The OpenTelemetry SDK's sampler names (OTEL_TRACES_SAMPLER); "" = that variable, else parentbased_always_on. */
export const TRACING_SAMPLERS = ["", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"] as const;

export interface TracingConfig {
  enabled: boolean;
  /** OTLP/HTTP base URL (spans go to <endpoint>/v1/traces); "" = the OTEL_EXPORTER_OTLP_* variables. */
  endpoint: string;
  protocol: (typeof TRACING_PROTOCOLS)[number];
  /** service.name; "" = OTEL_SERVICE_NAME, else "herd". */
  service_name: string;
  sampler: (typeof TRACING_SAMPLERS)[number];
  /** Ratio of the traceidratio samplers; -1 = OTEL_TRACES_SAMPLER_ARG, else 1. */
  sampler_arg: number;
  /** vLLM engines export their own spans to the same endpoint (--otlp-traces-endpoint). */
  engines: boolean;
}

/** One planner pool: the engines started from one engines[] entry, scaled together. */
export interface PlannerPoolConfig {
  /** Index of the engines[] entry whose engines this pool scales. */
  engine: number;
  min: number;
  max: number;
  /** One engine's sustainable throughput at the SLO (from `herd bench` / `herd simulate --calibrate`). */
  prefill_tokens_per_s: number;
  decode_tokens_per_s: number;
  /** Idle engines sleep (vLLM sleep mode: --enable-sleep-mode, POST /sleep) before they are stopped. */
  can_sleep: boolean;
  /** Time-of-day floors, `HH:MM-HH:MM=N` in the node's local time (a range may wrap midnight). */
  floors: string[];
  /** An operator's pin: exactly this many engines; -1 = none. */
  pin: number;
}

export interface PlannerSectionConfig {
  enabled: boolean;
  /** Log the actions instead of taking them. */
  dry_run: boolean;
  tick_ms: number;
  utilization_target: number;
  down_headroom: number;
  stable_window_ms: number;
  panic_window_ms: number;
  down_window_ms: number;
  down_step_ms: number;
  up_hold_ms: number;
  idle_to_sleep_ms: number;
  sleep_to_stop_ms: number;
  /** GPUs the planner may hold on this node; 0 = every GPU of the host. */
  gpu_budget: number;
  /** Requests held while a pool has no ready engine, by count and by body bytes. */
  hold_max: number;
  hold_max_bytes: number;
  /** A held request gets 503 with Retry-After after this. */
  hold_timeout_ms: number;
  pools: PlannerPoolConfig[];
  /** SLA mode (src/planner/sla.ts); null = size from the pools' capacity figures. */
  slo: PlannerSloConfig | null;
}

/** planner.slo: latency targets the pools are sized for, from the capacity model and the predicted load. */
export interface PlannerSloConfig {
  ttft_ms: number;
  itl_ms: number;
  /** A `herd simulate --calibrate --save` file (its `cost`); "" = a sim entry's own flags, else the built-in figures. */
  profile: string;
  horizon_ms: number;
  correction_ewma: number;
  correction_max: number;
}
