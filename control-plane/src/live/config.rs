//! `rakazo serve` configuration of live screens: the flags (clap, with their environment
//! variables) of the user's control-lease TTL, of how many streams one capability URL may have
//! open and of how many windows one screen may be shown in, and their range checks. Nothing else in the module reads configuration.

use clap::Args;
use std::time::Duration;

/// Default TTL of a user's control lease (docs/lifecycle.md#takeover: 15 minutes). Taking control
/// again while it is live renews it; when it lapses, the control and terminal streams issued under
/// it close at their next once-per-second re-check.
pub const DEFAULT_CONTROL_LEASE_TTL: Duration = Duration::from_secs(15 * 60);
/// Shortest TTL accepted: the open streams are re-checked once a second, a shorter lease could
/// not be told apart from that.
const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest TTL accepted: a day. A forgotten control lease keeps runs from starting on the bot
/// and the computer awake; longer than that is a lease nobody renews on purpose.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// Default cap on the websockets open at once through one capability URL: a URL handed to a
/// few people is fine, a URL posted widely does not become a broadcast.
pub const DEFAULT_MAX_STREAMS_PER_URL: usize = 8;
/// Highest cap accepted (each stream is a guest connection; the guest serves at most 32 clients
/// per view or control server).
const MAX_STREAMS_PER_URL: usize = 32;

/// Default cap on the viewer and control windows open at once on one screen, through however
/// many URLs.
pub const DEFAULT_MAX_VIEWERS_PER_SCREEN: usize = 16;
/// Highest accepted: the guest serves at most 32 clients per screen server.
const MAX_VIEWERS_PER_SCREEN: usize = 32;

/// `rakazo serve` flags of live screens.
#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    /// How long a user's control lease (takeover) lives unless taken again; control and
    /// terminal streams close when it lapses.
    #[arg(long, env = "RAKAZO_CONTROL_LEASE_TTL_SECS",
          default_value_t = DEFAULT_CONTROL_LEASE_TTL.as_secs())]
    pub control_lease_ttl_secs: u64,
    /// How many websockets (viewers, control windows or terminals) one capability URL may
    /// have open at once; past it the upgrade answers 429 until one closes.
    #[arg(long, env = "RAKAZO_MAX_STREAMS_PER_URL",
          default_value_t = DEFAULT_MAX_STREAMS_PER_URL)]
    pub max_streams_per_url: usize,
    /// How many viewer and control windows one screen (a bot's desktop) may have open at
    /// once, through however many capability URLs; past it the upgrade answers 429.
    #[arg(long, env = "RAKAZO_MAX_VIEWERS_PER_SCREEN",
          default_value_t = DEFAULT_MAX_VIEWERS_PER_SCREEN)]
    pub max_viewers_per_screen: usize,
}

impl LiveArgs {
    /// Range-checks the flags.
    pub fn resolve(&self) -> anyhow::Result<LiveConfig> {
        let ttl = Duration::from_secs(self.control_lease_ttl_secs);
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            anyhow::bail!(
                "the control lease TTL must be {}..={} seconds, got {}",
                MIN_TTL.as_secs(),
                MAX_TTL.as_secs(),
                self.control_lease_ttl_secs
            );
        }
        if !(1..=MAX_STREAMS_PER_URL).contains(&self.max_streams_per_url) {
            anyhow::bail!(
                "the streams per capability URL must be 1..={MAX_STREAMS_PER_URL}, got {}",
                self.max_streams_per_url
            );
        }
        if !(1..=MAX_VIEWERS_PER_SCREEN).contains(&self.max_viewers_per_screen) {
            anyhow::bail!(
                "the viewers per screen must be 1..={MAX_VIEWERS_PER_SCREEN}, got {}",
                self.max_viewers_per_screen
            );
        }
        Ok(LiveConfig {
            control_lease_ttl: ttl,
            max_streams_per_url: self.max_streams_per_url,
            max_viewers_per_screen: self.max_viewers_per_screen,
        })
    }
}

/// Live screens' settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveConfig {
    pub control_lease_ttl: Duration,
    /// Most websockets open at once through one capability URL.
    pub max_streams_per_url: usize,
    /// Most viewer and control windows open at once on one screen.
    pub max_viewers_per_screen: usize,
}

impl LiveConfig {
    /// The caps the stream registry keeps.
    pub fn caps(&self) -> super::streams::Caps {
        super::streams::Caps {
            per_url: self.max_streams_per_url,
            per_screen: self.max_viewers_per_screen,
        }
    }
}

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            control_lease_ttl: DEFAULT_CONTROL_LEASE_TTL,
            max_streams_per_url: DEFAULT_MAX_STREAMS_PER_URL,
            max_viewers_per_screen: DEFAULT_MAX_VIEWERS_PER_SCREEN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl(secs: u64) -> anyhow::Result<LiveConfig> {
        LiveArgs {
            control_lease_ttl_secs: secs,
            max_streams_per_url: DEFAULT_MAX_STREAMS_PER_URL,
            max_viewers_per_screen: DEFAULT_MAX_VIEWERS_PER_SCREEN,
        }
        .resolve()
    }

    #[test]
    fn the_ttl_is_bounded() {
        assert_eq!(
            ttl(900).unwrap(),
            LiveConfig::default(),
            "the default is 15 minutes"
        );
        assert_eq!(
            ttl(1).unwrap().control_lease_ttl,
            Duration::from_secs(1),
            "the shortest"
        );
        assert_eq!(
            ttl(24 * 3600).unwrap().control_lease_ttl,
            Duration::from_secs(24 * 3600)
        );
        assert!(ttl(0).is_err());
        assert!(ttl(24 * 3600 + 1).is_err());
        assert!(ttl(u64::MAX).is_err());
    }

    #[test]
    fn the_flag_defaults_to_fifteen_minutes() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            live: LiveArgs,
        }
        let cli = Cli::try_parse_from(["rakazo"]).unwrap();
        assert_eq!(cli.live.resolve().unwrap(), LiveConfig::default());
        let cli = Cli::try_parse_from(["rakazo", "--control-lease-ttl-secs", "3"]).unwrap();
        assert_eq!(
            cli.live.resolve().unwrap().control_lease_ttl,
            Duration::from_secs(3)
        );
        let cli = Cli::try_parse_from(["rakazo", "--max-streams-per-url", "2"]).unwrap();
        assert_eq!(cli.live.resolve().unwrap().max_streams_per_url, 2);
        for bad in ["0", "33"] {
            let cli = Cli::try_parse_from(["rakazo", "--max-streams-per-url", bad]).unwrap();
            assert!(cli.live.resolve().is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["rakazo", "--max-viewers-per-screen", "3"]).unwrap();
        assert_eq!(cli.live.resolve().unwrap().caps().per_screen, 3);
        for bad in ["0", "33"] {
            let cli = Cli::try_parse_from(["rakazo", "--max-viewers-per-screen", bad]).unwrap();
            assert!(cli.live.resolve().is_err(), "{bad}");
        }
    }
}
