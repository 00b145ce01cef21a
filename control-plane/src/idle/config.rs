//! `rakazo serve` configuration of idle suspension: the flags (clap, with their environment
//! variables), their range checks, and the derived job period and write throttle. Nothing else in
//! the module reads configuration.

use clap::Args;
use std::time::Duration;

/// Default idle timeout: 15 minutes. Long enough that a person reading a run's result, or a bot
/// between two runs of a schedule, finds the computer warm (each suspension costs a checkpoint
/// and, later, a start); short enough that a forgotten computer is not kept up for hours. It
/// matches the user control lease's TTL (docs/lifecycle.md#takeover): a person who walks away loses
/// control after 15 minutes, and the computer suspends 15 minutes after its last use.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long a takeover request keeps a non-billing computer awake (docs/lifecycle.md#takeover).
pub const TAKEOVER_KEEP_AWAKE: Duration = Duration::from_secs(30 * 60);
/// Default maximum lifetime of background work: 4 hours after the computer's last use through
/// the API, work inside it (a background process, a busy CPU, a printing terminal) no longer
/// keeps it up. A build or a test suite started and left finishes well within it; a process
/// stuck in a loop, or a page animating forever, cannot keep a computer up for days.
pub const DEFAULT_BACKGROUND_MAX: Duration = Duration::from_secs(4 * 3600);
/// Default CPU threshold, in percent of one CPU over the job's last interval: an idle Xvnc
/// or Chrome stays well under it, a build or a page still loading is above.
pub const DEFAULT_CPU_PERCENT: u32 = 10;
/// Longest idle timeout or keep-awake window accepted: a week.
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// `rakazo serve` flags of idle suspension.
#[derive(Debug, Clone, Args)]
pub struct IdleArgs {
    /// Suspend a running computer unused for this many seconds (checkpoint its home, then stop
    /// it); 0 disables idle suspension.
    #[arg(long, env = "RAKAZO_IDLE_TIMEOUT_SECS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs())]
    pub idle_timeout_secs: u64,
    /// How long a run's takeover request keeps a computer of a non-billing provider awake.
    #[arg(long, env = "RAKAZO_TAKEOVER_KEEP_AWAKE_SECS",
          default_value_t = TAKEOVER_KEEP_AWAKE.as_secs())]
    pub takeover_keep_awake_secs: u64,
    /// How long after a computer's last use through the API the work its guest reports
    /// (commands, background processes, terminal output, CPU) still keeps it up.
    #[arg(long, env = "RAKAZO_IDLE_BACKGROUND_MAX_SECS",
          default_value_t = DEFAULT_BACKGROUND_MAX.as_secs())]
    pub idle_background_max_secs: u64,
    /// CPU use (percent of one CPU, over the idle job's last interval, the guest itself not
    /// counted) above which a computer counts as working.
    #[arg(long, env = "RAKAZO_IDLE_CPU_PERCENT", default_value_t = DEFAULT_CPU_PERCENT)]
    pub idle_cpu_percent: u32,
}

impl IdleArgs {
    /// Range-checks the flags.
    pub fn resolve(&self) -> anyhow::Result<IdleConfig> {
        let max = MAX_WINDOW.as_secs();
        if self.idle_timeout_secs > max
            || self.takeover_keep_awake_secs > max
            || self.idle_background_max_secs > max
        {
            anyhow::bail!(
                "idle timeout, takeover keep-awake and background maximum must be at most {max} seconds"
            );
        }
        if !(1..=10_000).contains(&self.idle_cpu_percent) {
            anyhow::bail!(
                "idle CPU threshold must be 1..=10000 percent of one CPU, not {}",
                self.idle_cpu_percent
            );
        }
        Ok(IdleConfig {
            timeout: (self.idle_timeout_secs > 0)
                .then(|| Duration::from_secs(self.idle_timeout_secs)),
            keep_awake: Duration::from_secs(self.takeover_keep_awake_secs),
            background_max: Duration::from_secs(self.idle_background_max_secs),
            cpu_threshold_milli: self.idle_cpu_percent * 10,
        })
    }
}

/// Idle suspension's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleConfig {
    /// `None`: disabled.
    pub timeout: Option<Duration>,
    pub keep_awake: Duration,
    /// Work the guest reports keeps a computer up at most this long after its last use.
    pub background_max: Duration,
    /// CPU use, in thousandths of one CPU, above which the computer counts as working.
    pub cpu_threshold_milli: u32,
}

impl Default for IdleConfig {
    fn default() -> Self {
        Self {
            timeout: Some(DEFAULT_IDLE_TIMEOUT),
            keep_awake: TAKEOVER_KEEP_AWAKE,
            background_max: DEFAULT_BACKGROUND_MAX,
            cpu_threshold_milli: DEFAULT_CPU_PERCENT * 10,
        }
    }
}

impl IdleConfig {
    /// How often the job looks: a quarter of the timeout, between 200 ms and 30 s, so a computer
    /// is suspended at most that late.
    pub fn period(&self) -> Duration {
        let t = self.timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT);
        (t / 4).clamp(Duration::from_millis(200), Duration::from_secs(30))
    }

    /// How often a computer's last use is written to its row while it is being used: a tenth
    /// of the timeout, at most 10 s. Between writes the gate's in-memory mark is newer; a
    /// restart loses at most this much of a computer's recent use.
    pub(super) fn write_every_ms(&self) -> i64 {
        let t = self.timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT);
        let every = (t / 10).min(Duration::from_secs(10));
        i64::try_from(every.as_millis()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(timeout: u64, keep: u64) -> IdleArgs {
        IdleArgs {
            idle_timeout_secs: timeout,
            takeover_keep_awake_secs: keep,
            idle_background_max_secs: DEFAULT_BACKGROUND_MAX.as_secs(),
            idle_cpu_percent: DEFAULT_CPU_PERCENT,
        }
    }

    #[test]
    fn zero_disables_and_windows_are_bounded() {
        let off = args(0, 1800).resolve().unwrap();
        assert_eq!(off.timeout, None);
        let on = args(2, 5).resolve().unwrap();
        assert_eq!(on.timeout, Some(Duration::from_secs(2)));
        assert_eq!(on.keep_awake, Duration::from_secs(5));
        assert!(args(8 * 24 * 3600, 1800).resolve().is_err());
        assert!(args(900, 8 * 24 * 3600).resolve().is_err());
        let mut a = args(900, 1800);
        a.idle_background_max_secs = 8 * 24 * 3600;
        assert!(a.resolve().is_err());
        let mut a = args(900, 1800);
        a.idle_cpu_percent = 0;
        assert!(a.resolve().is_err());
        a.idle_cpu_percent = 25;
        let cfg = a.resolve().unwrap();
        assert_eq!(cfg.cpu_threshold_milli, 250);
        assert_eq!(cfg.background_max, DEFAULT_BACKGROUND_MAX);
    }

    #[test]
    fn the_job_looks_often_enough_but_not_too_often() {
        let cfg = |secs| IdleConfig {
            timeout: Some(Duration::from_secs(secs)),
            ..IdleConfig::default()
        };
        assert_eq!(cfg(1).period(), Duration::from_millis(250));
        assert_eq!(IdleConfig::default().period(), Duration::from_secs(30));
        assert_eq!(cfg(2).write_every_ms(), 200);
        assert_eq!(IdleConfig::default().write_every_ms(), 10_000);
    }
}
