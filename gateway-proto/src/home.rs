//! Home export and import (docs/homes.md): the guest streams its home out as one archive
//! (homes `FORMAT.md`, "Archive") and reads one back in. The archive is plaintext on the tunnel
//! (QUIC is the transport's encryption); sealing happens in the control plane.
//!
//! Both requests carry the [`HomeAuthority`] they act under: the control plane's knowledge of
//! the computer's execution leases when it started the operation. The guest refuses one started
//! on older knowledge than its own fence table (`ErrorCode::StaleLease`) before it does anything.

use crate::lease::BotId;
use serde::{Deserialize, Deserializer, Serialize};

/// Most bots a [`HomeAuthority`] may name: 1024 entries of at most 140 bytes each stay far below
/// a frame.
pub const MAX_HOME_AUTHORITY: usize = 1024;

/// The fence of one bot's latest execution lease, as the control plane knows it: held, lapsed or
/// released (a released lease keeps its fence; only its owner is forgotten).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFence {
    pub bot: BotId,
    pub fence: u64,
}

/// What a home export or import acts under: the latest lease fence of every bot of the computer
/// that the control plane knows when it starts the operation (live, lapsed or just released).
/// A bot it does not name is one it knows no lease of (fence 0).
///
/// The guest refuses the operation when it knows a higher fence for any bot than this names: the
/// control plane then acts on stale knowledge (a run started after it decided to checkpoint or
/// restore; an import would replace that run's home under it). Invariant, checked on decode: at
/// most [`MAX_HOME_AUTHORITY`] entries, no bot twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HomeAuthority {
    fences: Vec<LeaseFence>,
}

/// Why a [`HomeAuthority`] was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HomeAuthorityError {
    #[error("home authority names {0} bots, more than the {MAX_HOME_AUTHORITY} allowed")]
    TooMany(usize),
    #[error("home authority names bot {0} twice")]
    Duplicate(BotId),
}

impl HomeAuthority {
    /// Checks the bounds and wraps `fences` (kept in the given order).
    pub fn new(fences: Vec<LeaseFence>) -> Result<Self, HomeAuthorityError> {
        if fences.len() > MAX_HOME_AUTHORITY {
            return Err(HomeAuthorityError::TooMany(fences.len()));
        }
        let mut seen = std::collections::HashSet::with_capacity(fences.len());
        for f in &fences {
            if !seen.insert(&f.bot) {
                return Err(HomeAuthorityError::Duplicate(f.bot.clone()));
            }
        }
        Ok(Self { fences })
    }

    /// Every bot named, with its fence.
    pub fn fences(&self) -> &[LeaseFence] {
        &self.fences
    }

    /// The fence named for `bot`; 0 when it is not named (no lease known).
    pub fn fence_of(&self, bot: &BotId) -> u64 {
        self.fences
            .iter()
            .find(|f| &f.bot == bot)
            .map_or(0, |f| f.fence)
    }
}

#[derive(Deserialize)]
struct RawHomeAuthority {
    fences: Vec<LeaseFence>,
}

impl<'de> Deserialize<'de> for HomeAuthority {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawHomeAuthority::deserialize(d)?;
        HomeAuthority::new(raw.fences).map_err(serde::de::Error::custom)
    }
}

/// Export the home. The guest quiesces browsers first if asked, answers
/// [`crate::Reply::ExportStart`], then sends the archive as raw bytes and finishes the stream.
/// A failure after `ExportStart` resets the stream; the archive's own end marker tells a
/// complete export from a truncated one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeExportRequest {
    /// Close every bot's browser first (CDP `Browser.close` flushes cookies); each restarts on
    /// the bot's next graphical call.
    pub quiesce_browsers: bool,
    /// The leases the export acts under; checked by the guest before it quiesces anything.
    pub authority: HomeAuthority,
    /// This export's token: the guest remembers the stamps of the files it exports under it
    /// (the last two exports' only), so a later export can name it in `since`.
    pub token: ExportToken,
    /// The export whose stamps to compare with: a file whose size, inode, mode, mtime and ctime
    /// are those it had then is sent as unchanged (homes `FORMAT.md`, "Delta archive"). `None`,
    /// or a token the guest no longer has, sends every file.
    pub since: Option<ExportToken>,
}

/// Names one home export (random, chosen by the control plane).
pub type ExportToken = [u8; 16];

/// Import an archive into the (fresh) home. The control plane sends exactly `size` raw bytes
/// after this frame; the guest unpacks into a staging directory, checks the whole archive, then
/// swaps it in and answers [`crate::Reply::Imported`], or `Error` with nothing written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeImportRequest {
    pub size: u64,
    /// The leases the import acts under; checked by the guest before it reads a byte of the
    /// archive.
    pub authority: HomeAuthority,
}

/// The guest's estimate of an export, from a walk before packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportStart {
    /// Bytes of file content the archive will carry (progress total; the archive adds headers).
    pub content_bytes: u64,
    pub entries: u64,
}

/// What an import wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Imported {
    pub content_bytes: u64,
    pub entries: u64,
}

/// Where a bot's command or shell starts when it names no directory (docs/lifecycle.md#vocabulary:
/// a Team computer's bots start in `bots/<bot-id>/`, a Private computer's bot in the home).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartDir {
    /// The home itself.
    #[default]
    Home,
    /// The bot's own `bots/<bot-id>/` in the home, created (mode 0700, never through a symlink)
    /// on first use.
    BotDir,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(bot: &str, fence: u64) -> LeaseFence {
        LeaseFence {
            bot: BotId::new(bot).unwrap(),
            fence,
        }
    }

    #[test]
    fn an_authority_is_bounded_and_names_each_bot_once() {
        let most: Vec<_> = (0..MAX_HOME_AUTHORITY)
            .map(|i| fence(&format!("b{i}"), 1))
            .collect();
        assert!(HomeAuthority::new(most.clone()).is_ok());
        let mut over = most;
        over.push(fence("one-more", 1));
        assert_eq!(
            HomeAuthority::new(over),
            Err(HomeAuthorityError::TooMany(MAX_HOME_AUTHORITY + 1))
        );
        assert_eq!(
            HomeAuthority::new(vec![fence("b1", 1), fence("b2", 1), fence("b1", 2)])
                .unwrap_err()
                .to_string(),
            "home authority names bot b1 twice"
        );
    }

    #[test]
    fn an_unnamed_bot_has_fence_zero() {
        let a = HomeAuthority::new(vec![fence("b1", 4)]).unwrap();
        assert_eq!(a.fence_of(&BotId::new("b1").unwrap()), 4);
        assert_eq!(a.fence_of(&BotId::new("b2").unwrap()), 0);
    }

    #[test]
    fn decoding_checks_the_bounds() {
        // Built past `new` to stand for a peer that sends a bot twice.
        let twice = RawAuthorityForTest {
            fences: vec![fence("b1", 1), fence("b1", 2)],
        };
        let bytes = postcard::to_allocvec(&twice).unwrap();
        let err = postcard::from_bytes::<HomeAuthority>(&bytes).unwrap_err();
        assert!(matches!(err, postcard::Error::SerdeDeCustom), "{err:?}");
        let ok = RawAuthorityForTest {
            fences: vec![fence("b1", 1), fence("b2", 2)],
        };
        let bytes = postcard::to_allocvec(&ok).unwrap();
        let decoded: HomeAuthority = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(decoded.fences(), &ok.fences[..]);
    }

    #[derive(Serialize)]
    struct RawAuthorityForTest {
        fences: Vec<LeaseFence>,
    }
}
