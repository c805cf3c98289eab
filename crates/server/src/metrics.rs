//! Prometheus metrics (`GET /metrics`), per model: queue length, running
//! sequences, KV-cache use (0..1), prompt and generated token counters,
//! and histograms of time to first token, inter-token latency and request
//! latency. Written by the schedulers, read by the exporter.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The label every metric carries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    pub model: String,
}

/// The labels of the response counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: String,
    pub status: String,
}

/// Latency buckets in seconds: 1 ms to ~33 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

type HistFamily = Family<ModelLabel, Histogram, fn() -> Histogram>;

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    queue: Family<ModelLabel, Gauge>,
    running: Family<ModelLabel, Gauge>,
    kv_usage: Family<ModelLabel, Gauge<f64, AtomicU64>>,
    prompt_tokens: Family<ModelLabel, Counter>,
    generated_tokens: Family<ModelLabel, Counter>,
    requests: Family<ModelLabel, Counter>,
    ttft: HistFamily,
    itl: HistFamily,
    latency: HistFamily,
    responses: Family<RouteLabel, Counter>,
    cached_tokens: Family<ModelLabel, Counter>,
    prefix_cache_bytes: Family<ModelLabel, Gauge>,
    prefix_evicted: Family<ModelLabel, Counter>,
    kv_pool_bytes: Family<ModelLabel, Gauge>,
    drafted_tokens: Family<ModelLabel, Counter>,
    accepted_tokens: Family<ModelLabel, Counter>,
    acceptance: Family<ModelLabel, Gauge<f64, AtomicU64>>,
}

/// One model's metrics, cheap to clone (each handle shares its value).
#[derive(Clone)]
pub struct ModelMetrics {
    /// Requests waiting for admission.
    pub queue: Gauge,
    /// Sequences being prefilled or decoded.
    pub running: Gauge,
    /// KV-cache bytes reserved over the budget.
    pub kv_usage: Gauge<f64, AtomicU64>,
    pub prompt_tokens: Counter,
    pub generated_tokens: Counter,
    /// Requests finished (any outcome).
    pub requests: Counter,
    /// Seconds from arrival to the first generated token.
    pub ttft: Histogram,
    /// Seconds between consecutive tokens of a sequence.
    pub itl: Histogram,
    /// Seconds from arrival to the last token (or embedding).
    pub latency: Histogram,
    /// Prompt tokens copied from the prefix cache instead of computed.
    pub cached_tokens: Counter,
    /// Bytes the prefix cache's blocks hold.
    pub prefix_cache_bytes: Gauge,
    /// Prefix-cache blocks evicted to stay in the budget.
    pub prefix_evicted: Counter,
    /// Bytes of KV blocks alive (running sequences and the prefix cache).
    pub kv_pool_bytes: Gauge,
    /// Tokens drafted by speculative decoding (`--lookup`).
    pub drafted_tokens: Counter,
    /// Drafted tokens that the picks confirmed.
    pub accepted_tokens: Counter,
    /// `accepted_tokens / drafted_tokens` since the start.
    pub acceptance: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("ferrite");
        let hist = || HistFamily::new_with_constructor(latency_histogram as fn() -> Histogram);
        let m = Metrics {
            queue: Family::default(),
            running: Family::default(),
            kv_usage: Family::default(),
            prompt_tokens: Family::default(),
            generated_tokens: Family::default(),
            requests: Family::default(),
            ttft: hist(),
            itl: hist(),
            latency: hist(),
            responses: Family::default(),
            cached_tokens: Family::default(),
            prefix_cache_bytes: Family::default(),
            prefix_evicted: Family::default(),
            kv_pool_bytes: Family::default(),
            drafted_tokens: Family::default(),
            accepted_tokens: Family::default(),
            acceptance: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "queue_length",
            "Requests waiting for admission",
            m.queue.clone(),
        );
        registry.register(
            "running_sequences",
            "Sequences being prefilled or decoded",
            m.running.clone(),
        );
        registry.register(
            "kv_cache_usage",
            "KV-cache memory reserved, as a fraction of the budget (0..1)",
            m.kv_usage.clone(),
        );
        registry.register(
            "prompt_tokens",
            "Prompt tokens processed",
            m.prompt_tokens.clone(),
        );
        registry.register(
            "generated_tokens",
            "Tokens generated",
            m.generated_tokens.clone(),
        );
        registry.register("requests", "Requests finished", m.requests.clone());
        registry.register(
            "time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token",
            m.ttft.clone(),
        );
        registry.register(
            "inter_token_latency_seconds",
            "Time between consecutive generated tokens of a sequence",
            m.itl.clone(),
        );
        registry.register(
            "request_latency_seconds",
            "Time from a request's arrival to its end",
            m.latency.clone(),
        );
        registry.register(
            "responses",
            "HTTP responses by route and status",
            m.responses.clone(),
        );
        registry.register(
            "prompt_cached_tokens",
            "Prompt tokens whose keys and values came from the prefix cache (counted in prompt_tokens too)",
            m.cached_tokens.clone(),
        );
        registry.register(
            "prefix_cache_bytes",
            "Bytes held by the prefix cache's blocks",
            m.prefix_cache_bytes.clone(),
        );
        registry.register(
            "prefix_cache_evicted_blocks",
            "Prefix-cache blocks evicted to stay within --prefix-cache-mib",
            m.prefix_evicted.clone(),
        );
        registry.register(
            "kv_pool_bytes",
            "Bytes of KV-cache blocks alive: running sequences' and the prefix cache's, each shared block once",
            m.kv_pool_bytes.clone(),
        );
        registry.register(
            "speculative_drafted_tokens",
            "Tokens drafted by speculative decoding (serve --lookup), fed after each sequence's next token",
            m.drafted_tokens.clone(),
        );
        registry.register(
            "speculative_accepted_tokens",
            "Drafted tokens confirmed by the sampler's picks (each saves a forward pass)",
            m.accepted_tokens.clone(),
        );
        registry.register(
            "speculative_acceptance_ratio",
            "Accepted over drafted tokens since the server started (0 before any draft)",
            m.acceptance.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Counts a response of `route` with `status`.
    pub fn response(&self, route: &str, status: u16) {
        self.responses
            .get_or_create(&RouteLabel {
                route: route.to_string(),
                status: status.to_string(),
            })
            .inc();
    }

    /// The handles of model `name` (every metric appears at once, at 0).
    pub fn for_model(&self, name: &str) -> ModelMetrics {
        let l = ModelLabel {
            model: name.to_string(),
        };
        ModelMetrics {
            queue: self.queue.get_or_create(&l).clone(),
            running: self.running.get_or_create(&l).clone(),
            kv_usage: self.kv_usage.get_or_create(&l).clone(),
            prompt_tokens: self.prompt_tokens.get_or_create(&l).clone(),
            generated_tokens: self.generated_tokens.get_or_create(&l).clone(),
            requests: self.requests.get_or_create(&l).clone(),
            ttft: self.ttft.get_or_create(&l).clone(),
            itl: self.itl.get_or_create(&l).clone(),
            latency: self.latency.get_or_create(&l).clone(),
            cached_tokens: self.cached_tokens.get_or_create(&l).clone(),
            prefix_cache_bytes: self.prefix_cache_bytes.get_or_create(&l).clone(),
            prefix_evicted: self.prefix_evicted.get_or_create(&l).clone(),
            kv_pool_bytes: self.kv_pool_bytes.get_or_create(&l).clone(),
            drafted_tokens: self.drafted_tokens.get_or_create(&l).clone(),
            accepted_tokens: self.accepted_tokens.get_or_create(&l).clone(),
            acceptance: self.acceptance.get_or_create(&l).clone(),
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
