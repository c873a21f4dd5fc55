"""The keys of RUN_DIR/metrics.jsonl: each a short, stable name for what several engines call differently (the
scraper, chaos/run/scrape.py, writes them; the report reads them). Its docstring has the table with meanings."""

from __future__ import annotations

# key -> (sample names, aggregate over label sets)
KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "running": (("vllm:num_requests_running", "llamacpp:requests_processing"), "sum"),
    "waiting": (("vllm:num_requests_waiting", "llamacpp:requests_deferred"), "sum"),
    "kv_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
    "preemptions_total": (("vllm:num_preemptions_total",), "sum"),
    "prefix_cache_hits_total": (("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"), "sum"),
    "prefix_cache_queries_total": (("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
                                   "sum"),
    "prompt_tokens_total": (("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"), "sum"),
    "generation_tokens_total": (("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"), "sum"),
    "requests_ok_total": (("vllm:request_success_total",), "sum"),
    "http_errors_total": (("chaos:http_errors_total",), "sum"),
    "gw_in_flight": (("gateway:in_flight", "litellm_in_flight_requests"), "sum"),
    "gw_queue_depth": (("gateway:queue_depth",), "sum"),
    "gw_cache_entries": (("gateway:cache_entries",), "sum"),
    "gw_served_total": (("gateway:served_total", "litellm_proxy_total_requests_metric_total"), "sum"),
    "gw_retries_total": (("gateway:retries_total",), "sum"),
    "gw_retries_denied_total": (("gateway:retries_denied_total",), "sum"),
    "gw_fallbacks_total": (("gateway:fallbacks_total",), "sum"),
    "gw_rejected_total": (("gateway:rejected_total",), "sum"),
    "gw_passed_up_total": (("gateway:passed_up_total",), "sum"),
    "gw_midstream_failures_total": (("gateway:midstream_failures_total",), "sum"),
    "gw_upstreams_up": (("gateway:upstream_up",), "sum"),
    "gw_upstream_failures_total": (("litellm_deployment_failure_responses_total",), "sum"),
    "gw_cooldowns_total": (("litellm_deployment_cooled_down_total",), "sum"),
}
# prefix -> (sample name, the label whose value completes the key)
PER_LABEL = {"up.": ("gateway:upstream_up", "replica"), "breaker.": ("gateway:breaker_state", "replica"),
             "outstanding.": ("gateway:upstream_outstanding", "replica"),
             "state.": ("litellm_deployment_state", "model_id")}


def named(key: str) -> bool:
    """A key of the table above (not one of the extra name{labels} samples)."""
    return key in KEYS or key == "gw_ejected" or key.startswith(tuple(PER_LABEL))
