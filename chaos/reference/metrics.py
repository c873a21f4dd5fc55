"""Prometheus metrics under vLLM's names, so dashboards built for vLLM read this server too."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.3, 0.4,
               0.5, 0.75, 1.0, 2.5, 5.0)


class EngineCollector:
    """Gauges and engine-side counters read at scrape time."""

    def __init__(self, async_engine, model_name: str):
        self.async_engine, self.model_name = async_engine, model_name

    def collect(self):
        eng = self.async_engine.engine
        labels = [self.model_name]

        def gauge(name, doc, value):
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(labels, value)
            return g

        def counter(name, doc, value):
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(labels, value)
            return c

        yield gauge("vllm:num_requests_running", "Requests in the running batch.", eng.num_running)
        yield gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", self.async_engine.num_waiting)
        yield gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1).",
                    eng.block_manager.usage())
        yield counter("vllm:num_preemptions", "Sequences preempted for lack of KV blocks.",
                      eng.scheduler.num_preemptions)
        yield counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                      eng.block_manager.prefix_queries)
        yield counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.",
                      eng.block_manager.prefix_hits)
        yield counter("vllm:prompt_tokens", "Prompt tokens computed.", eng.num_prompt_tokens_total)
        yield counter("vllm:generation_tokens", "Tokens generated.", eng.num_generation_tokens_total)


class ServerMetrics:
    def __init__(self, async_engine, model_name: str):
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.registry.register(EngineCollector(async_engine, model_name))
        kw = dict(labelnames=["model_name"], registry=self.registry)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.",
                              buckets=LATENCY_BUCKETS, **kw).labels(model_name)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Time between tokens.",
                             buckets=ITL_BUCKETS, **kw).labels(model_name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.",
                             buckets=LATENCY_BUCKETS, **kw).labels(model_name)
        self.queue = Histogram("vllm:request_queue_time_seconds", "Time waiting before first scheduled.",
                               buckets=LATENCY_BUCKETS, **kw).labels(model_name)
        self.success = Counter("vllm:request_success", "Finished requests by reason.",
                               labelnames=["model_name", "finished_reason"], registry=self.registry)
        self.http_errors = Counter("chaos:http_errors", "Error responses by status and code.",
                                   labelnames=["model_name", "status", "code"], registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
