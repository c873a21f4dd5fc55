"""The resilient gateway in front of reference replicas: load balancing, health checks, outlier ejection,
per-attempt timeouts, bounded retries with backoff, circuit breakers, a fallback chain (backup pool, cached
answer, clear 503) and admission control. A worked example of the seed's client-side advice."""
