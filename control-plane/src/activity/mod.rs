//! The activity feed of each computer (docs/api.md#activity): what
//! its bots did (`computer.command`: commands with their exit code and output tail, file writes,
//! desktop `open`/`launch`) and what happened to it (`computer.lifecycle`, with a cause).
//!
//! The API handlers and the core call [`Activity`] once per operation or change; it redacts
//! ([`redact`]), stores ([`store`], bounded per computer by `--activity-retention`) and wakes the
//! followers of this process ([`feed`]), which also poll the database so that events another
//! replica recorded reach them. Recording never fails or delays what it records: a failed write
//! is a WARN, and an operation's event is written after its answer has gone out. Read-only
//! operations (listing, reading, showing, screenshots, snapshots) are not recorded, and neither
//! is any text a bot typed (desktop `type`, browser `fill`/`type`), which may be a password.
//!
//! This module knows nothing of the core or the API: they import it.

pub mod feed;
pub mod redact;
pub mod store;

use crate::clock::now_ms;
use crate::schema::activity::{
    ActivityBody, Cause, CommandAction, CommandEvent, LifecycleEvent, LifecycleKind, NetworkEvent,
};
use clap::Args;
use std::sync::Arc;
use store::ActivityStore;
use tokio::sync::broadcast;
use tracing::warn;

/// Default events kept per computer.
pub const DEFAULT_RETENTION: u32 = 1000;
/// Most events kept per computer that may be configured.
const MAX_RETENTION: u32 = 1_000_000;
/// The output tail kept of a command: its last 4 KiB.
pub const OUTPUT_TAIL_BYTES: usize = 4096;
/// Longest command line, path or reason stored (longer ones are cut, marked with `…`).
pub const MAX_LINE_BYTES: usize = 2048;

/// `rakazo serve` flags of the activity feed.
#[derive(Debug, Clone, Args)]
pub struct ActivityArgs {
    /// Events kept per computer in its activity feed (older ones are deleted as new ones come);
    /// 0 turns the feed off (nothing is recorded).
    #[arg(long, env = "RAKAZO_ACTIVITY_RETENTION", default_value_t = DEFAULT_RETENTION)]
    pub activity_retention: u32,
}

impl ActivityArgs {
    /// Range-checks the flags.
    pub fn resolve(&self) -> anyhow::Result<ActivityConfig> {
        if self.activity_retention > MAX_RETENTION {
            anyhow::bail!("--activity-retention must be at most {MAX_RETENTION}");
        }
        Ok(ActivityConfig {
            retention: self.activity_retention,
        })
    }
}

/// The feed's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivityConfig {
    /// Events kept per computer; 0: off.
    pub retention: u32,
}

impl Default for ActivityConfig {
    fn default() -> Self {
        Self {
            retention: DEFAULT_RETENTION,
        }
    }
}

/// The feed: records events and tells this process's followers.
pub struct Activity {
    pub store: ActivityStore,
    config: ActivityConfig,
    /// The computer id of every event recorded here, for followers to wake on.
    recorded: broadcast::Sender<Arc<str>>,
}

/// A command's outcome as the exec relay saw it.
#[derive(Debug, Clone, Default)]
pub struct ExecOutcome {
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub uncertain: bool,
}

/// What a command's event needs besides its outcome.
#[derive(Debug, Clone)]
pub struct CommandStart {
    pub computer: String,
    pub bot: Option<String>,
    pub action: CommandAction,
    /// The unredacted line (argv joined, a path, a target).
    pub line: String,
    /// Values to hide wherever they appear (the command's environment).
    pub secrets: Vec<String>,
    pub started_ms: i64,
}

impl CommandStart {
    /// A command line of `argv`, quoted as a shell would need it.
    pub fn exec(
        computer: &str,
        bot: Option<&str>,
        argv: &[String],
        env: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            computer: computer.to_string(),
            bot: bot.map(str::to_string),
            action: CommandAction::Exec,
            line: shell_line(argv),
            secrets: env.into_iter().collect(),
            started_ms: now_ms(),
        }
    }

    /// A one-line action (write_file, open, launch).
    pub fn action(computer: &str, bot: Option<&str>, action: CommandAction, line: String) -> Self {
        Self {
            computer: computer.to_string(),
            bot: bot.map(str::to_string),
            action,
            line,
            secrets: Vec::new(),
            started_ms: now_ms(),
        }
    }
}

impl Activity {
    pub fn new(db: crate::db::Db, config: ActivityConfig) -> Self {
        let (recorded, _) = broadcast::channel(256);
        Self {
            store: ActivityStore::new(db),
            config,
            recorded,
        }
    }

    /// Whether anything is recorded (`--activity-retention` above 0).
    pub fn enabled(&self) -> bool {
        self.config.retention > 0
    }

    /// Wakes on every event this process records (the computer's id).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.recorded.subscribe()
    }

    /// Stores `body` in `computer`'s feed; a failure is logged, never returned.
    pub async fn record(&self, computer: &str, body: ActivityBody) {
        if !self.enabled() {
            return;
        }
        match self
            .store
            .insert(computer, now_ms(), &body, self.config.retention)
            .await
        {
            Ok(_) => {
                let _ = self.recorded.send(Arc::from(computer));
            }
            Err(e) => {
                warn!(computer_id = %computer, error = %crate::homes::chain(&e), "could not record an activity event");
            }
        }
    }

    /// Records a finished command: its redacted line, exit code or error, duration and the
    /// redacted tail of its output.
    pub async fn command(&self, start: &CommandStart, outcome: ExecOutcome, tail: Option<&Tail>) {
        if !self.enabled() {
            return;
        }
        let secrets: Vec<&str> = start.secrets.iter().map(String::as_str).collect();
        let clean = |s: &str| bounded(&redact::redact(s, &secrets), MAX_LINE_BYTES);
        let (output_tail, output_truncated) = match tail {
            Some(t) if !t.is_empty() => {
                let text = String::from_utf8_lossy(&t.bytes()).into_owned();
                (Some(redact::redact(&text, &secrets)), t.truncated())
            }
            _ => (None, false),
        };
        let event = CommandEvent {
            action: start.action,
            bot: start.bot.clone(),
            line: clean(&start.line),
            exit_code: outcome.exit_code,
            duration_ms: u64::try_from(now_ms() - start.started_ms).unwrap_or(0),
            output_tail,
            output_truncated,
            bytes: None,
            error: outcome.error.as_deref().map(clean),
            uncertain: outcome.uncertain,
        };
        self.record(&start.computer, ActivityBody::Command(event))
            .await;
    }

    /// Records a one-line action (a file write, `open`, `launch`): its size or its error.
    pub async fn action(&self, start: &CommandStart, result: Result<Option<u64>, (String, bool)>) {
        if !self.enabled() {
            return;
        }
        let clean = |s: &str| bounded(&redact::redact(s, &[]), MAX_LINE_BYTES);
        let (bytes, error, uncertain) = match result {
            Ok(bytes) => (bytes, None, false),
            Err((e, uncertain)) => (None, Some(clean(&e)), uncertain),
        };
        let event = CommandEvent {
            action: start.action,
            bot: start.bot.clone(),
            line: clean(&start.line),
            exit_code: None,
            duration_ms: u64::try_from(now_ms() - start.started_ms).unwrap_or(0),
            output_tail: None,
            output_truncated: false,
            bytes,
            error,
            uncertain,
        };
        self.record(&start.computer, ActivityBody::Command(event))
            .await;
    }

    /// Records one of the egress gateway's aggregated decisions.
    pub async fn network(&self, event: &egress::Event) {
        let (domain, ip) = match &event.target {
            egress::Target::Domain(d) => (Some(d.clone()), None),
            egress::Target::Ip(ip) => (None, Some(ip.to_string())),
        };
        let body = NetworkEvent {
            via: match event.kind {
                egress::EventKind::Dns => "dns",
                egress::EventKind::Connection => "connection",
                egress::EventKind::HttpProxy => "http_proxy",
            }
            .to_string(),
            domain,
            ip,
            port: event.port,
            reason: event.reason.as_str().to_string(),
            count: event.count,
            bytes_up: event.bytes_up,
            bytes_down: event.bytes_down,
            duration_ms: u64::try_from(event.duration.as_millis()).unwrap_or(u64::MAX),
        };
        let body = if event.allowed {
            ActivityBody::NetworkAllowed(body)
        } else {
            ActivityBody::NetworkDenied(body)
        };
        self.record(&event.computer.0, body).await;
    }

    /// Records a lifecycle change of `computer` with its cause and reason.
    pub async fn lifecycle(
        &self,
        computer: &str,
        event: LifecycleKind,
        cause: Cause,
        reason: impl AsRef<str>,
    ) {
        self.lifecycle_home(computer, event, cause, reason, None, None)
            .await;
    }

    /// [`Activity::lifecycle`] for a checkpoint or restore: with its revision and bytes.
    pub async fn lifecycle_home(
        &self,
        computer: &str,
        event: LifecycleKind,
        cause: Cause,
        reason: impl AsRef<str>,
        revision: Option<u64>,
        bytes: Option<u64>,
    ) {
        if !self.enabled() {
            return;
        }
        let body = ActivityBody::Lifecycle(LifecycleEvent {
            event,
            cause,
            reason: bounded(&redact::redact(reason.as_ref(), &[]), MAX_LINE_BYTES),
            revision,
            bytes,
        });
        self.record(computer, body).await;
    }
}

/// `argv` as one line: arguments with spaces or shell characters in single quotes.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The last [`OUTPUT_TAIL_BYTES`] of a command's output, stdout and stderr as they came.
#[derive(Debug, Default)]
pub struct Tail {
    buf: std::collections::VecDeque<u8>,
    dropped: bool,
}

impl Tail {
    pub fn push(&mut self, bytes: &[u8]) {
        let keep = &bytes[bytes.len().saturating_sub(OUTPUT_TAIL_BYTES)..];
        if keep.len() < bytes.len() {
            self.dropped = true;
        }
        self.buf.extend(keep);
        let over = self.buf.len().saturating_sub(OUTPUT_TAIL_BYTES);
        if over > 0 {
            self.dropped = true;
            self.buf.drain(..over);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The kept bytes. When earlier output was dropped, the first (cut) word is left out too:
    /// half a secret is no longer recognisable as one, so it must not be shown.
    pub fn bytes(&self) -> Vec<u8> {
        let v: Vec<u8> = self.buf.iter().copied().collect();
        if !self.dropped {
            return v;
        }
        match v.iter().position(u8::is_ascii_whitespace) {
            Some(i) => v[i..].to_vec(),
            None => Vec::new(),
        }
    }

    pub fn truncated(&self) -> bool {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let mut t = Tail::default();
        t.push(b"hello ");
        t.push(b"world");
        assert_eq!(t.bytes(), b"hello world");
        assert!(!t.truncated());
        t.push(&vec![b'x'; OUTPUT_TAIL_BYTES]);
        t.push(b" end");
        let b = t.bytes();
        // The cut word (the x…) is left out: only what follows the first whitespace remains.
        assert_eq!(b, b" end");
        assert!(t.truncated());
        let mut t = Tail::default();
        t.push(&vec![b'y'; OUTPUT_TAIL_BYTES + 10]);
        assert!(t.bytes().is_empty(), "one cut word is all there is");
    }

    #[test]
    fn argv_is_quoted_where_a_shell_needs_it() {
        let argv: Vec<String> = ["sh", "-c", "echo 'hi' there", "a=b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_line(&argv), r"sh -c 'echo '\''hi'\'' there' a=b");
    }

    #[test]
    fn long_lines_are_cut_on_a_character() {
        assert_eq!(bounded("ééé", 3), "é…");
        assert_eq!(bounded("abc", 3), "abc");
    }
}
