//! The control plane's metrics: one [`Metrics`] per process, owned by the [`crate::core::Core`]
//! the server builds and handed to whoever records (no global registry).
//!
//! What is recorded where, once each:
//! - operations (`rakazo_operations_total{op, outcome}` and
//!   `rakazo_operation_duration_seconds{op, outcome}`): by the API router (`api::metrics`), the
//!   one place every HTTP operation passes whether it reaches a guest or is refused before (a
//!   stale lease, a suspending computer), and by the MCP tools' one wrapper (`Tools::run`) for
//!   each tool call. `op` is the route's name from the route table (`mcp.<tool>` for a tool
//!   call), never an id.
//!   The duration runs from the request's arrival to the end of its response body, so a
//!   streamed exec or checkpoint counts whole; the outcome is the status, or what a stream
//!   reported last ([`LateOutcome`]);
//! - HTTP requests by status class (`rakazo_http_requests_total{class}`): by the router, for
//!   every request including refused and unauthorized ones;
//! - home checkpoints (`rakazo_home_checkpoint_bytes`, `rakazo_home_checkpoint_duration_seconds`):
//!   by `Core::checkpoint_home`, which every trigger goes through;
//! - idle suspensions (`rakazo_idle_suspensions_total{result}`): by the idle job;
//! - gauges of what is live (connected guests, live streams by kind, maintenance jobs by
//!   state) are sampled from their owners when scraped ([`Sample`]), so they can never drift.
//!
//! *Invariant:* every label value comes from a fixed set; no computer id, bot id, path or token
//! is ever a label, so the number of series is bounded whatever the fleet.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The content type of [`Metrics::encode`]'s text: Prometheus' text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// How an operation ended, from the caller's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done (2xx, a stream that ended normally).
    Ok,
    /// Refused as the caller's mistake or conflict (4xx): nothing happened.
    Refused,
    /// The computer, a provider or the control plane failed (5xx), and nothing is uncertain.
    Failed,
    /// The tunnel was lost mid-operation: the guest may or may not have acted.
    Uncertain,
    /// The guest did not answer within its deadline (504).
    Timeout,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Refused,
        Outcome::Failed,
        Outcome::Uncertain,
        Outcome::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Refused => "refused",
            Self::Failed => "failed",
            Self::Uncertain => "uncertain",
            Self::Timeout => "timeout",
        }
    }

    /// The outcome an HTTP answer stands for: 504 is a timeout, an uncertain error uncertain,
    /// other 4xx refused, other 5xx failed.
    pub fn of_status(status: u16, uncertain: bool) -> Self {
        match status {
            504 => Self::Timeout,
            _ if uncertain => Self::Uncertain,
            400..=499 => Self::Refused,
            500..=599 => Self::Failed,
            _ => Self::Ok,
        }
    }

    fn to_u8(self) -> u8 {
        self as u8 + 1
    }

    fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(usize::from(v.checked_sub(1)?)).copied()
    }
}

/// What a streamed response reports after its head was sent (an exec whose tunnel was lost, a
/// checkpoint that failed after its progress lines): the handler sets it before it sends the
/// stream's last line, and the router records the operation with it instead of the status.
/// Carried to the router in the response's extensions.
#[derive(Debug, Clone, Default)]
pub struct LateOutcome(std::sync::Arc<AtomicU8>);

impl LateOutcome {
    pub fn set(&self, outcome: Outcome) {
        self.0.store(outcome.to_u8(), Ordering::Release);
    }

    pub fn get(&self) -> Option<Outcome> {
        Outcome::from_u8(self.0.load(Ordering::Acquire))
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// An egress figure: `what` from a fixed set (a decision, a direction, a DNS answer). Never a
/// computer's id: per-computer figures are in `GET /v1/computers/{id}/network`, so the
/// scrape's series stay bounded whatever the number of computers.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressLabels {
    what: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    kind: &'static str,
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolStateLabels {
    pool: String,
    state: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Durations from 1 ms to about 2.3 hours (a long exec) in factors of 2.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 24))
}

/// Sizes from 4 KiB to 64 GiB in factors of 4.
fn bytes_histogram() -> Histogram {
    Histogram::new(exponential_buckets(4096.0, 4.0, 13))
}

/// How an idle suspension attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suspension {
    /// Checkpointed and stopped.
    Suspended,
    /// The checkpoint failed: nothing was stopped.
    CheckpointFailed,
    /// Checkpointed, but the stop failed.
    StopFailed,
}

/// The live state sampled when `/metrics` is scraped, from the modules that own it.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Guests connected to this control plane (`tunnel::Registry`).
    pub connected_guests: u64,
    /// Open live streams (`live::streams`), by kind: `view`, `control`, `terminal`.
    pub live_streams: Vec<(&'static str, u64)>,
    /// Maintenance jobs by kind and state (`update`/`recover`; `running`, `interrupted`, …).
    /// Filled where the scrape samples (`api::metrics::sample`) once the jobs table exists;
    /// a kind or state must come from the jobs module's fixed set, never from stored text.
    pub jobs: Vec<(&'static str, &'static str, u64)>,
    /// The computers behind this replica's egress gateway, their counters summed (each since
    /// it was attached: `egress::Computer::counter_snapshot`).
    pub egress: egress::CounterSnapshot,
}

/// Every metric of this process, in its own registry.
pub struct Metrics {
    registry: Registry,
    operations: Family<OpLabels, Counter>,
    operation_seconds: Histograms<OpLabels>,
    http_requests: Family<ClassLabels, Counter>,
    checkpoint_bytes: Histogram,
    checkpoint_seconds: Histograms<OutcomeLabels>,
    idle_suspensions: Family<ResultLabels, Counter>,
    connected_guests: Gauge,
    live_streams: Family<KindLabels, Gauge>,
    jobs: Family<JobLabels, Gauge>,
    egress_connections: Family<EgressLabels, Gauge>,
    egress_bytes: Family<EgressLabels, Gauge>,
    egress_dns: Family<EgressLabels, Gauge>,
    pool_members: Family<PoolStateLabels, Gauge>,
    pool_handouts: Family<PoolLabels, Counter>,
    pool_misses: Family<PoolLabels, Counter>,
    pool_refill_seconds: Histograms<PoolLabels>,
    /// Serialises sampling and encoding, so two scrapes never interleave their gauge updates.
    scrape: std::sync::Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("rakazo");
        let operations = Family::<OpLabels, Counter>::default();
        registry.register(
            "operations",
            "API operations by kind (route) and outcome: ok, refused (4xx), failed (5xx), uncertain (tunnel lost mid-operation), timeout (guest silent past its deadline)",
            operations.clone(),
        );
        let operation_seconds: Histograms<OpLabels> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "operation_duration_seconds",
            "API operations' duration, from the request's arrival to the end of its response (a streamed exec counts whole)",
            operation_seconds.clone(),
        );
        let http_requests = Family::<ClassLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered by the API listener, by status class",
            http_requests.clone(),
        );
        let checkpoint_bytes = bytes_histogram();
        registry.register(
            "home_checkpoint_bytes",
            "Archive bytes of each completed home checkpoint",
            checkpoint_bytes.clone(),
        );
        let checkpoint_seconds: Histograms<OutcomeLabels> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "home_checkpoint_duration_seconds",
            "Home checkpoints' duration (lease wait, export, upload), by outcome: ok or failed",
            checkpoint_seconds.clone(),
        );
        let idle_suspensions = Family::<ResultLabels, Counter>::default();
        registry.register(
            "idle_suspensions",
            "Idle suspensions attempted, by result: suspended, checkpoint_failed, stop_failed",
            idle_suspensions.clone(),
        );
        let connected_guests = Gauge::default();
        registry.register(
            "connected_guests",
            "Guests connected to this control plane",
            connected_guests.clone(),
        );
        let live_streams = Family::<KindLabels, Gauge>::default();
        registry.register(
            "live_streams",
            "Open live streams by kind: view (viewers of a desktop), control (a user controlling a desktop), terminal",
            live_streams.clone(),
        );
        let jobs = Family::<JobLabels, Gauge>::default();
        registry.register(
            "maintenance_jobs",
            "Maintenance jobs (update, recover) by state",
            jobs.clone(),
        );
        let egress_connections = Family::<EgressLabels, Gauge>::default();
        registry.register(
            "egress_connections",
            "Connections of the computers behind this replica's egress gateway now, since each was attached, by what: allowed, denied, limited (refused at the connection limit, also counted denied), active (open now)",
            egress_connections.clone(),
        );
        let egress_bytes = Family::<EgressLabels, Gauge>::default();
        registry.register(
            "egress_bytes",
            "Bytes the computers behind this replica's egress gateway now sent (what=up) and received (what=down) since each was attached",
            egress_bytes.clone(),
        );
        let egress_dns = Family::<EgressLabels, Gauge>::default();
        registry.register(
            "egress_dns_queries",
            "DNS queries the computers behind this replica's egress gateway now made since each was attached, by what: answered, refused (any reason), rate_limited (also counted refused)",
            egress_dns.clone(),
        );
        let pool_members = Family::<PoolStateLabels, Gauge>::default();
        registry.register(
            "pool_members",
            "Warm pools' unassigned members by state: ready (guest connected, desktop up if asked for) or starting, as this replica's refiller last saw them",
            pool_members.clone(),
        );
        let pool_handouts = Family::<PoolLabels, Counter>::default();
        registry.register(
            "pool_handouts",
            "Computers created from a warm pool's ready member",
            pool_handouts.clone(),
        );
        let pool_misses = Family::<PoolLabels, Counter>::default();
        registry.register(
            "pool_misses",
            "Creates from a warm pool that found no ready member and booted a computer cold",
            pool_misses.clone(),
        );
        let pool_refill_seconds: Histograms<PoolLabels> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "pool_refill_duration_seconds",
            "Time to boot one new warm-pool member until it is ready",
            pool_refill_seconds.clone(),
        );
        Self {
            registry,
            pool_members,
            pool_handouts,
            pool_misses,
            pool_refill_seconds,
            egress_connections,
            egress_bytes,
            egress_dns,
            operations,
            operation_seconds,
            http_requests,
            checkpoint_bytes,
            checkpoint_seconds,
            idle_suspensions,
            connected_guests,
            live_streams,
            jobs,
            scrape: std::sync::Mutex::new(()),
        }
    }

    /// Records one operation (`op` a route's or an MCP tool's fixed name).
    pub fn operation(&self, op: &'static str, outcome: Outcome, took: Duration) {
        let labels = OpLabels {
            op,
            outcome: outcome.as_str(),
        };
        self.operations.get_or_create(&labels).inc();
        self.operation_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Records one HTTP answer by its status class.
    pub fn http_request(&self, status: u16) {
        let class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.http_requests
            .get_or_create(&ClassLabels { class })
            .inc();
    }

    /// Records a home checkpoint: its archive bytes when it completed, its duration either way.
    pub fn checkpoint(&self, bytes: Option<u64>, took: Duration) {
        let outcome = if let Some(bytes) = bytes {
            // Exact up to 2^53 bytes, far beyond any home.
            self.checkpoint_bytes.observe(bytes as f64);
            "ok"
        } else {
            "failed"
        };
        self.checkpoint_seconds
            .get_or_create(&OutcomeLabels { outcome })
            .observe(took.as_secs_f64());
    }

    /// Records a create from pool `pool`: handed out a ready member, or missed (booted cold).
    pub fn pool_create(&self, pool: &str, handed_out: bool) {
        let labels = PoolLabels {
            pool: pool.to_string(),
        };
        if handed_out {
            self.pool_handouts.get_or_create(&labels).inc();
        } else {
            self.pool_misses.get_or_create(&labels).inc();
        }
    }

    /// Records one pool member booted until ready.
    pub fn pool_refill(&self, pool: &str, took: Duration) {
        self.pool_refill_seconds
            .get_or_create(&PoolLabels {
                pool: pool.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Sets pool `pool`'s members now: `ready` and `starting`.
    pub fn pool_members(&self, pool: &str, ready: u64, starting: u64) {
        for (state, n) in [("ready", ready), ("starting", starting)] {
            self.pool_members
                .get_or_create(&PoolStateLabels {
                    pool: pool.to_string(),
                    state,
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Forgets a deleted pool's gauges.
    pub fn pool_deleted(&self, pool: &str) {
        for state in ["ready", "starting"] {
            self.pool_members.remove(&PoolStateLabels {
                pool: pool.to_string(),
                state,
            });
        }
    }

    /// Records an idle suspension attempt.
    pub fn idle_suspension(&self, result: Suspension) {
        let result = match result {
            Suspension::Suspended => "suspended",
            Suspension::CheckpointFailed => "checkpoint_failed",
            Suspension::StopFailed => "stop_failed",
        };
        self.idle_suspensions
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// The text a scraper reads: `sample`'s gauges, then every family.
    pub fn encode(&self, sample: &Sample) -> String {
        let _one = self
            .scrape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.connected_guests
            .set(i64::try_from(sample.connected_guests).unwrap_or(i64::MAX));
        // A kind absent from this sample reads 0, not its last value.
        self.live_streams.clear();
        for (kind, n) in &sample.live_streams {
            self.live_streams
                .get_or_create(&KindLabels { kind })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        self.jobs.clear();
        for (kind, state, n) in &sample.jobs {
            self.jobs
                .get_or_create(&JobLabels { kind, state })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let set = |family: &Family<EgressLabels, Gauge>, what, n: u64| {
            family
                .get_or_create(&EgressLabels { what })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        let e = &sample.egress;
        set(&self.egress_connections, "allowed", e.connections_allowed);
        set(&self.egress_connections, "denied", e.connections_denied);
        set(&self.egress_connections, "limited", e.connections_limited);
        set(
            &self.egress_connections,
            "active",
            u64::from(e.connections_active),
        );
        set(&self.egress_bytes, "up", e.bytes_up);
        set(&self.egress_bytes, "down", e.bytes_down);
        set(&self.egress_dns, "answered", e.dns_answered);
        set(&self.egress_dns, "refused", e.dns_refused);
        set(&self.egress_dns, "rate_limited", e.dns_rate_limited);
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug in a label.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_of_statuses() {
        assert_eq!(Outcome::of_status(200, false), Outcome::Ok);
        assert_eq!(Outcome::of_status(409, false), Outcome::Refused);
        assert_eq!(Outcome::of_status(503, false), Outcome::Failed);
        assert_eq!(Outcome::of_status(502, true), Outcome::Uncertain);
        assert_eq!(Outcome::of_status(504, true), Outcome::Timeout);
        let late = LateOutcome::default();
        assert_eq!(late.get(), None);
        for o in Outcome::ALL {
            late.set(o);
            assert_eq!(late.get(), Some(o));
        }
    }

    #[test]
    fn encodes_what_was_recorded_with_bounded_labels() {
        let m = Metrics::new();
        m.operation("exec", Outcome::Ok, Duration::from_millis(3));
        m.operation("exec", Outcome::Ok, Duration::from_millis(5));
        m.operation("exec", Outcome::Refused, Duration::from_millis(1));
        m.http_request(200);
        m.http_request(404);
        m.checkpoint(Some(10_000), Duration::from_millis(20));
        m.idle_suspension(Suspension::Suspended);
        let text = m.encode(&Sample {
            connected_guests: 3,
            live_streams: vec![("view", 2)],
            jobs: vec![("update", "running", 1)],
            egress: egress::CounterSnapshot {
                connections_allowed: 4,
                bytes_down: 1000,
                dns_refused: 2,
                ..Default::default()
            },
        });
        for line in [
            "rakazo_operations_total{op=\"exec\",outcome=\"ok\"} 2",
            "rakazo_operations_total{op=\"exec\",outcome=\"refused\"} 1",
            "rakazo_operation_duration_seconds_count{op=\"exec\",outcome=\"ok\"} 2",
            "rakazo_http_requests_total{class=\"2xx\"} 1",
            "rakazo_http_requests_total{class=\"4xx\"} 1",
            "rakazo_home_checkpoint_bytes_sum 10000.0",
            "rakazo_home_checkpoint_duration_seconds_count{outcome=\"ok\"} 1",
            "rakazo_idle_suspensions_total{result=\"suspended\"} 1",
            "rakazo_connected_guests 3",
            "rakazo_live_streams{kind=\"view\"} 2",
            "rakazo_maintenance_jobs{kind=\"update\",state=\"running\"} 1",
            "rakazo_egress_connections{what=\"allowed\"} 4",
            "rakazo_egress_bytes{what=\"down\"} 1000",
            "rakazo_egress_dns_queries{what=\"refused\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(
            text.contains("# TYPE rakazo_operations_total counter"),
            "{text}"
        );
        // The next sample replaces the gauges: a closed stream's kind is gone, not stale.
        let text = m.encode(&Sample::default());
        assert!(text.contains("rakazo_connected_guests 0"));
        assert!(!text.contains("rakazo_live_streams{"));
        assert!(text.contains("rakazo_egress_bytes{what=\"down\"} 0"));
    }
}
