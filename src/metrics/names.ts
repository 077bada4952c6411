// Every herd metric name, in one place, so dashboards, docs and tests share one spelling. Prefix
// `herd_`, units last (Prometheus conventions: seconds, `_total` for counters).

export const METRIC = {
  requestsTotal: "herd_requests_total",
  ttftSeconds: "herd_time_to_first_token_seconds",
  e2eSeconds: "herd_e2e_request_latency_seconds",
  timePerOutputTokenSeconds: "herd_time_per_output_token_seconds",
  workerInFlight: "herd_worker_in_flight",
  frontendInFlight: "herd_frontend_in_flight",
  routingDecisionsTotal: "herd_routing_decisions_total",
  engineRestartsTotal: "herd_engine_restarts_total",
  retriesTotal: "herd_retries_total",
  migrationsTotal: "herd_migrations_total",
  clientAbortsTotal: "herd_client_aborts_total",
  clientFailuresTotal: "herd_client_failures_total",
  upstreamErrorsTotal: "herd_upstream_errors_total",
  rejectedTotal: "herd_rejected_requests_total",
  workerState: "herd_worker_state",
  routingStageSeconds: "herd_routing_stage_seconds",
  predictedCachedTokensTotal: "herd_predicted_cached_tokens_total",
  reportedCachedTokensTotal: "herd_reported_cached_tokens_total",
  cachedTokensRatio: "herd_cached_tokens_prediction_ratio",
  tenantRequestsTotal: "herd_tenant_requests_total",
  tenantTokensTotal: "herd_tenant_tokens_total",
  tenantRateLimitedTotal: "herd_tenant_rate_limited_total",
  tenantQueueWaitSeconds: "herd_tenant_queue_wait_seconds",
  promptTokensTotal: "herd_prompt_tokens_total",
  // Node gauges (node-gauges.ts): read from the KV ingest, the cluster and the registry at scrape time.
  kvEventGapsTotal: "herd_kv_event_gaps_total",
  kvEventResyncsTotal: "herd_kv_event_resyncs_total",
  modelReadyWorkers: "herd_model_ready_workers",
  workerKvUsageRatio: "herd_worker_kv_usage_ratio",
  clusterTerm: "herd_cluster_term",
  clusterIsLeader: "herd_cluster_is_leader",
  clusterNodes: "herd_cluster_nodes",
  tlsCertExpiryTimestampSeconds: "herd_tls_cert_expiry_timestamp_seconds",
} as const;

