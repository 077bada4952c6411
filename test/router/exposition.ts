// Real-looking /metrics bodies (shapes from docs/references.md#engines-3 and #engines-6.3: prometheus_client output with
// HELP/TYPE lines, `model_name` and `engine` labels, _total counters, histogram buckets).
const M = 'model_name="Qwen/Qwen3-8B"';

export function vllmMetrics(o: { running: number; waiting: number; kv: number; engines?: number; oldKvName?: boolean }): string {
  const engines = o.engines ?? 1;
  const kvName = o.oldKvName ? "vllm:gpu_cache_usage_perc" : "vllm:kv_cache_usage_perc";
  const per = (f: (e: number) => string) => Array.from({ length: engines }, (_, e) => f(e)).join("\n");
  return `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12873.0
process_virtual_memory_bytes 3.2178176e+10
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
${per((e) => `vllm:num_requests_running{engine="${e}",${M}} ${o.running}.0`)}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
${per((e) => `vllm:num_requests_waiting{engine="${e}",${M}} ${o.waiting}.0`)}
# HELP ${kvName} KV-cache usage. 1 means 100 percent usage.
# TYPE ${kvName} gauge
${per((e) => `${kvName}{engine="${e}",${M}} ${o.kv}`)}
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",${M}} 40960.0
vllm:prefix_cache_hits_total{engine="0",${M}} 30720.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",${M}} 118.0
vllm:request_success_total{engine="0",finished_reason="length",${M}} 3.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",${M}} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.005",${M}} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",${M}} 121.0
vllm:time_to_first_token_seconds_count{engine="0",${M}} 121.0
vllm:time_to_first_token_seconds_sum{engine="0",${M}} 9.8125
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="27104",prefix_caching_hash_algo="sha256"} 1.0
`;
}

export function sglangMetrics(o: { running: number; queued: number; tokenUsage: number; dpRanks?: number; tpRanks?: number }): string {
  const ranks = o.dpRanks ?? 1;
  const tp = o.tpRanks ?? 1;
  const per = (name: string, v: number) =>
    Array.from({ length: ranks * tp }, (_, i) => `${name}{dp_rank="${Math.floor(i / tp)}",${M},pp_rank="0",tp_rank="${i % tp}"} ${v}`).join("\n");
  return `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
${per("sglang:num_running_reqs", o.running)}
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
${per("sglang:num_queue_reqs", o.queued)}
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
${per("sglang:token_usage", o.tokenUsage)}
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{${M}} 0.62
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",${M}} 10.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",${M}} 12.0
`;
}
