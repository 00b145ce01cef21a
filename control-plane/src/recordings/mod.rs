//! Screen recordings (docs/recordings.md): which computers are recorded, the index of what was
//! recorded (migration 0015), and the job that pulls recordings from guests ([`job`]) into the
//! sealed store beside the homes (`homes::cas::RecordingBlobs`).
//!
//! A recording is the guest's record stream (`gateway_proto::recording`), kept as the pieces
//! each pull returned; reading a bot's recording concatenates its pieces in time order. Pieces
//! expire after `--recording-retention` and go with their computer.

pub mod job;
pub mod video;

use crate::db::{column, Db, DbError};
use gateway_proto::recording::{encode_record, records, RecordHeader};
use homes::cas::{CasError, RecordingBlobs};
use std::sync::Arc;

/// How long pieces are kept by default (hours).
pub const DEFAULT_RETENTION_HOURS: u32 = 7 * 24;
/// Longest retention that may be configured (hours).
const MAX_RETENTION_HOURS: u32 = 24 * 3650;

/// `rakazo serve` flags of screen recordings.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordingArgs {
    /// Hours a screen recording is kept (its pieces older than this are deleted).
    #[arg(long, env = "RAKAZO_RECORDING_RETENTION_HOURS", default_value_t = DEFAULT_RETENTION_HOURS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_RETENTION_HOURS)))]
    pub recording_retention_hours: u32,
}

impl RecordingArgs {
    pub fn retention(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(self.recording_retention_hours) * 3600)
    }
}
/// Most bytes one read of a recording returns (ask for a shorter time range beyond it).
pub const MAX_READ_BYTES: u64 = 512 << 20;

/// One stored piece, as the index has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub computer: String,
    pub name: String,
    pub bot: String,
    pub session: String,
    pub first_seq: u64,
    pub next_seq: u64,
    pub start_ms: i64,
    pub end_ms: i64,
    pub bytes: u64,
    pub lost: u64,
}

/// Whether a computer (or a workspace's computers) is recorded, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub enabled: bool,
    pub set_by: String,
    pub set_at_ms: i64,
    /// Set on the computer itself (`false`: its workspace's default).
    pub own: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("the recording store failed: {0}")]
    Store(String),
}

impl From<CasError> for RecordingError {
    fn from(e: CasError) -> Self {
        RecordingError::Store(homes::error_chain(&e))
    }
}

/// The recordings of every computer: the settings and index in the database, the pieces in
/// the store.
pub struct Recordings {
    db: Db,
    blobs: Arc<RecordingBlobs>,
    pub retention: std::time::Duration,
}

const PIECE_COLUMNS: &str =
    "computer_id, name, bot, session, first_seq, next_seq, start_ms, end_ms, bytes, lost";

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Recordings {
    pub fn new(db: Db, blobs: Arc<RecordingBlobs>) -> Self {
        Self {
            db,
            blobs,
            retention: std::time::Duration::from_secs(u64::from(DEFAULT_RETENTION_HOURS) * 3600),
        }
    }

    fn piece(r: &sqlx::any::AnyRow) -> Result<Piece, DbError> {
        let t = "recording_pieces";
        let name: String = column(r, t, "?", "name")?;
        let n = |c: &str| -> Result<i64, DbError> { column(r, t, &name, c) };
        Ok(Piece {
            computer: column(r, t, &name, "computer_id")?,
            bot: column(r, t, &name, "bot")?,
            session: column(r, t, &name, "session")?,
            first_seq: u(n("first_seq")?),
            next_seq: u(n("next_seq")?),
            start_ms: n("start_ms")?,
            end_ms: n("end_ms")?,
            bytes: u(n("bytes")?),
            lost: u(n("lost")?),
            name,
        })
    }

    async fn setting_in(
        &self,
        table: &'static str,
        key: &str,
        id: &str,
    ) -> Result<Option<Setting>, DbError> {
        let row = sqlx::query(&format!(
            "SELECT enabled, set_by, set_at FROM {table} WHERE {key} = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|r| {
            let enabled: i64 = column(&r, table, id, "enabled")?;
            Ok(Setting {
                enabled: enabled != 0,
                set_by: column(&r, table, id, "set_by")?,
                set_at_ms: column(&r, table, id, "set_at")?,
                own: table == "recording_settings",
            })
        })
        .transpose()
    }

    /// The computer's setting: its own, else its workspace's default (`workspace`), else none
    /// (not recorded).
    pub async fn setting(
        &self,
        computer: &str,
        workspace: Option<&str>,
    ) -> Result<Option<Setting>, DbError> {
        if let Some(s) = self
            .setting_in("recording_settings", "computer_id", computer)
            .await?
        {
            return Ok(Some(s));
        }
        match workspace {
            Some(ws) => self.workspace_setting(ws).await,
            None => Ok(None),
        }
    }

    /// A workspace's default.
    pub async fn workspace_setting(&self, workspace: &str) -> Result<Option<Setting>, DbError> {
        self.setting_in("recording_workspaces", "workspace", workspace)
            .await
    }

    /// Writes a setting into `table` (keyed by `key`).
    async fn upsert(
        &self,
        table: &str,
        key: &str,
        id: &str,
        enabled: bool,
        by: &str,
        now_ms: i64,
    ) -> Result<Setting, DbError> {
        sqlx::query(&format!(
            "INSERT INTO {table} ({key}, enabled, set_by, set_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT ({key}) DO UPDATE \
             SET enabled = excluded.enabled, set_by = excluded.set_by, set_at = excluded.set_at"
        ))
        .bind(id)
        .bind(i64::from(enabled))
        .bind(by)
        .bind(now_ms)
        .execute(self.db.pool())
        .await?;
        Ok(Setting {
            enabled,
            set_by: by.to_string(),
            set_at_ms: now_ms,
            own: table == "recording_settings",
        })
    }

    /// Sets a workspace's default for its computers without a setting of their own.
    pub async fn set_workspace(
        &self,
        workspace: &str,
        enabled: bool,
        by: &str,
        now_ms: i64,
    ) -> Result<Setting, DbError> {
        self.upsert(
            "recording_workspaces",
            "workspace",
            workspace,
            enabled,
            by,
            now_ms,
        )
        .await
    }

    /// Turns recording of the computer's screens on or off.
    pub async fn set(
        &self,
        computer: &str,
        enabled: bool,
        by: &str,
        now_ms: i64,
    ) -> Result<Setting, DbError> {
        self.upsert(
            "recording_settings",
            "computer_id",
            computer,
            enabled,
            by,
            now_ms,
        )
        .await
    }

    /// The running computers being recorded: on by their own setting, or by their workspace's
    /// default when they have none.
    pub async fn enabled(&self) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query(
            "SELECT c.id AS computer_id FROM computers c \
             LEFT JOIN recording_settings s ON s.computer_id = c.id \
             LEFT JOIN recording_workspaces w ON w.workspace = c.workspace \
             WHERE c.state = 'running' AND COALESCE(s.enabled, w.enabled, 0) = 1",
        )
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|r| column(r, "recording_settings", "?", "computer_id"))
            .collect()
    }

    /// Where the bot's pull left off: the session and the last record taken.
    pub async fn cursor(
        &self,
        computer: &str,
        bot: &str,
    ) -> Result<Option<(String, u64)>, DbError> {
        let row = sqlx::query(&format!(
            "SELECT {PIECE_COLUMNS} FROM recording_pieces WHERE computer_id = $1 AND bot = $2 \
             ORDER BY start_ms DESC, name DESC LIMIT 1"
        ))
        .bind(computer)
        .bind(bot)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row
            .map(|r| Self::piece(&r))
            .transpose()?
            .map(|p| (p.session, p.next_seq.saturating_sub(1))))
    }

    /// Stores `bytes` (whole records, checked) as a piece and indexes it. `lost` records the
    /// guest dropped before it are marked by a gap record at its start.
    pub async fn add(
        &self,
        computer: &str,
        bot: &str,
        session: &str,
        (first_seq, next_seq): (u64, u64),
        lost: u64,
        bytes: Vec<u8>,
    ) -> Result<Piece, RecordingError> {
        let mut times = records(&bytes).filter_map(|r| r.ok().map(|(h, _)| h.time_ms()));
        let start_ms = times.next().unwrap_or(0);
        let end_ms = times.last().unwrap_or(start_ms).max(start_ms);
        let mut plain = Vec::with_capacity(bytes.len() + 64);
        if lost > 0 {
            encode_record(&RecordHeader::Gap { t: start_ms, lost }, &[], &mut plain);
        }
        plain.extend_from_slice(&bytes);
        let name = format!("{bot}/{start_ms:013}-{session}-{first_seq:010}");
        let piece = Piece {
            computer: computer.to_string(),
            name: name.clone(),
            bot: bot.to_string(),
            session: session.to_string(),
            first_seq,
            next_seq,
            start_ms,
            end_ms,
            bytes: plain.len() as u64,
            lost,
        };
        let blobs = self.blobs.clone();
        let c = computer.to_string();
        tokio::task::spawn_blocking(move || blobs.put(&c, &name, &plain))
            .await
            .map_err(|e| RecordingError::Store(e.to_string()))??;
        sqlx::query(&format!(
            "INSERT INTO recording_pieces ({PIECE_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING"
        ))
        .bind(&piece.computer)
        .bind(&piece.name)
        .bind(&piece.bot)
        .bind(&piece.session)
        .bind(i(piece.first_seq))
        .bind(i(piece.next_seq))
        .bind(piece.start_ms)
        .bind(piece.end_ms)
        .bind(i(piece.bytes))
        .bind(i(piece.lost))
        .execute(self.db.pool())
        .await
        .map_err(DbError::from)?;
        Ok(piece)
    }

    /// The computer's pieces (of one bot, overlapping `since..until` ms), in time order.
    pub async fn pieces(
        &self,
        computer: &str,
        bot: Option<&str>,
        since: Option<i64>,
        until: Option<i64>,
    ) -> Result<Vec<Piece>, DbError> {
        let of_bot = if bot.is_some() { "AND bot = $4" } else { "" };
        let sql = format!(
            "SELECT {PIECE_COLUMNS} FROM recording_pieces WHERE computer_id = $1 \
             AND end_ms >= $2 AND start_ms <= $3 {of_bot} ORDER BY start_ms, name"
        );
        let mut q = sqlx::query(&sql)
            .bind(computer)
            .bind(since.unwrap_or(i64::MIN))
            .bind(until.unwrap_or(i64::MAX));
        if let Some(b) = bot {
            q = q.bind(b);
        }
        let rows = q.fetch_all(self.db.pool()).await?;
        rows.iter().map(Self::piece).collect()
    }

    /// The bot's recording over `since..until`: its pieces' records, in order. Pieces that
    /// straddle the range come whole (a player needs the full frame before its first crop).
    pub async fn read(
        &self,
        computer: &str,
        bot: &str,
        since: Option<i64>,
        until: Option<i64>,
    ) -> Result<Vec<u8>, RecordingError> {
        let pieces = self.pieces(computer, Some(bot), since, until).await?;
        let total: u64 = pieces.iter().map(|p| p.bytes).sum();
        if total > MAX_READ_BYTES {
            return Err(RecordingError::TooLarge(format!(
                "that range of the recording is {total} bytes, over {MAX_READ_BYTES}: ask for a \
                 shorter one with since and until"
            )));
        }
        let blobs = self.blobs.clone();
        let c = computer.to_string();
        let out = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, CasError> {
            let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
            for p in &pieces {
                out.extend_from_slice(&blobs.get(&c, &p.name)?);
            }
            Ok(out)
        })
        .await
        .map_err(|e| RecordingError::Store(e.to_string()))??;
        Ok(out)
    }

    /// Deletes pieces that ended before `before_ms`; answers how many.
    pub async fn expire(&self, before_ms: i64) -> Result<usize, RecordingError> {
        let rows = sqlx::query(&format!(
            "SELECT {PIECE_COLUMNS} FROM recording_pieces WHERE end_ms < $1 LIMIT 1000"
        ))
        .bind(before_ms)
        .fetch_all(self.db.pool())
        .await
        .map_err(DbError::from)?;
        let pieces: Vec<Piece> = rows.iter().map(Self::piece).collect::<Result<_, _>>()?;
        for p in &pieces {
            self.delete_piece(p).await?;
        }
        Ok(pieces.len())
    }

    async fn delete_piece(&self, p: &Piece) -> Result<(), RecordingError> {
        let blobs = self.blobs.clone();
        let (c, n) = (p.computer.clone(), p.name.clone());
        tokio::task::spawn_blocking(move || blobs.delete(&c, &n))
            .await
            .map_err(|e| RecordingError::Store(e.to_string()))??;
        sqlx::query("DELETE FROM recording_pieces WHERE computer_id = $1 AND name = $2")
            .bind(&p.computer)
            .bind(&p.name)
            .execute(self.db.pool())
            .await
            .map_err(DbError::from)?;
        Ok(())
    }

    /// Deletes everything recorded of a computer, and its setting (it was destroyed).
    pub async fn forget(&self, computer: &str) -> Result<(), RecordingError> {
        for p in self.pieces(computer, None, None, None).await? {
            self.delete_piece(&p).await?;
        }
        let blobs = self.blobs.clone();
        let c = computer.to_string();
        tokio::task::spawn_blocking(move || blobs.forget(&c))
            .await
            .map_err(|e| RecordingError::Store(e.to_string()))??;
        sqlx::query("DELETE FROM recording_settings WHERE computer_id = $1")
            .bind(computer)
            .execute(self.db.pool())
            .await
            .map_err(DbError::from)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_proto::recording::InputSource;
    use homes::CasPlace;

    fn input(t: i64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_record(
            &RecordHeader::Input {
                t,
                by: InputSource::Agent,
                lease: None,
                what: "key Return".into(),
                x: None,
                y: None,
            },
            &[],
            &mut out,
        );
        out
    }

    #[tokio::test]
    async fn pieces_are_indexed_read_in_order_expired_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Arc::new(RecordingBlobs::new(
            CasPlace::Local(dir.path().to_path_buf()),
            homes::seal::ContentKey::generate(),
        ));
        let rec = Recordings::new(crate::db::testing::sqlite().await.unwrap(), blobs);
        assert!(rec.setting("c-1", None).await.unwrap().is_none());
        rec.set("c-1", true, "server", 5).await.unwrap();
        assert!(rec.setting("c-1", None).await.unwrap().unwrap().own);
        assert_eq!(rec.cursor("c-1", "b").await.unwrap(), None);
        let second = [input(300), input(400)].concat();
        rec.add("c-1", "b", "s1", (3, 5), 0, second.clone())
            .await
            .unwrap();
        rec.add("c-1", "b", "s1", (1, 3), 0, input(100))
            .await
            .unwrap();
        let p = rec
            .add("c-1", "b", "s2", (4, 5), 3, input(500))
            .await
            .unwrap();
        assert_eq!((p.start_ms, p.end_ms, p.lost), (500, 500, 3));
        assert_eq!(
            rec.cursor("c-1", "b").await.unwrap(),
            Some(("s2".to_string(), 4))
        );
        let all = rec.read("c-1", "b", None, None).await.unwrap();
        let times: Vec<i64> = records(&all).map(|r| r.unwrap().0.time_ms()).collect();
        assert_eq!(
            times,
            vec![100, 300, 400, 500, 500],
            "ordered, with the gap"
        );
        let part = rec.read("c-1", "b", Some(350), Some(450)).await.unwrap();
        assert_eq!(part, second);
        assert_eq!(rec.expire(350).await.unwrap(), 1);
        assert_eq!(rec.pieces("c-1", None, None, None).await.unwrap().len(), 2);
        rec.forget("c-1").await.unwrap();
        assert!(rec
            .pieces("c-1", None, None, None)
            .await
            .unwrap()
            .is_empty());
        assert!(rec.setting("c-1", None).await.unwrap().is_none());
    }
}
