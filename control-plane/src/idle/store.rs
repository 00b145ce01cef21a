//! The idle columns of the computer row (migration 0005) and the reads the idle rule needs:
//! live execution leases with their `waiting_takeover` marks, and live control leases.
//! SQL follows the portability rules of [`crate::db`].

use super::rules::Run;
use crate::computers::ComputerId;
use crate::db::{column, non_negative, Db, DbError};
use gateway_proto::{BotId, LeaseToken};

/// What the row and the lease tables say about one computer at `now`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    pub active_at_ms: i64,
    pub awake_until_ms: i64,
    pub runs: Vec<Run>,
    /// Bots with a live user control lease, sorted.
    pub control: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct IdleStore {
    db: Db,
}

impl IdleStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Records a use at `at_ms` (never moves the mark back).
    pub async fn used(&self, id: &ComputerId, at_ms: i64) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE computers SET idle_active_at = $2 WHERE id = $1 AND idle_active_at < $2",
        )
        .bind(id.as_str())
        .bind(at_ms)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Keeps the computer awake until at least `until_ms` (never shortens a window).
    pub async fn keep_awake(&self, id: &ComputerId, until_ms: i64) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE computers SET idle_awake_until = $2 WHERE id = $1 AND idle_awake_until < $2",
        )
        .bind(id.as_str())
        .bind(until_ms)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// The idle columns and the live leases of `id` at `now_ms`; `None` if there is no row.
    pub async fn observe(&self, id: &ComputerId, now_ms: i64) -> Result<Option<Stored>, DbError> {
        let row =
            sqlx::query("SELECT idle_active_at, idle_awake_until FROM computers WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(self.db.pool())
                .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let key = id.as_str();
        let active_at_ms: i64 = column(&row, "computers", key, "idle_active_at")?;
        let awake_until_ms: i64 = column(&row, "computers", key, "idle_awake_until")?;
        let leases = sqlx::query(
            "SELECT l.bot AS bot, l.owner AS owner, l.fence AS fence, w.waiting_takeover AS waiting \
             FROM leases l LEFT JOIN live_bots w ON w.computer_id = l.computer_id AND w.bot = l.bot \
             WHERE l.computer_id = $1 AND l.owner IS NOT NULL AND l.expires_at > $2 ORDER BY l.bot",
        )
        .bind(id.as_str())
        .bind(now_ms)
        .fetch_all(self.db.pool())
        .await?;
        let mut runs = Vec::with_capacity(leases.len());
        for row in &leases {
            let bot: String = column(row, "leases", key, "bot")?;
            let k = format!("{key}/{bot}");
            let owner: String = column(row, "leases", &k, "owner")?;
            let fence: i64 = column(row, "leases", &k, "fence")?;
            let waiting: Option<String> = column(row, "live_bots", &k, "waiting")?;
            let token = LeaseToken::new(owner, non_negative(fence, "leases", &k, "fence")?)
                .map_err(|e| DbError::corrupt("leases", &k, format!("owner: {e}")))?;
            // The mark counts only for the very lease that set it (a later run does not wait).
            let waiting_takeover = waiting.is_some_and(|w| w == token.to_string());
            runs.push(Run {
                bot: BotId::new(bot)
                    .map_err(|e| DbError::corrupt("leases", &k, format!("bot: {e}")))?,
                waiting_takeover,
            });
        }
        let controls = sqlx::query(
            "SELECT bot FROM live_bots WHERE computer_id = $1 AND control_id IS NOT NULL \
             AND control_expires_at > $2 ORDER BY bot",
        )
        .bind(id.as_str())
        .bind(now_ms)
        .fetch_all(self.db.pool())
        .await?;
        let control = controls
            .iter()
            .map(|r| column::<String>(r, "live_bots", key, "bot"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Stored {
            active_at_ms,
            awake_until_ms,
            runs,
            control,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::computers::{ComputerKind, ComputerStore, NewComputer, TokenHash, WorkspaceId};
    use crate::db::testing;
    use crate::lease::{LeaseStore, SqlLeaseStore};
    use crate::live::store::LiveStore;
    use std::time::Duration;

    async fn store_rules(db: Db) {
        let computers = ComputerStore::new(db.clone());
        let id = ComputerId::new(format!("c-{}", testing::random_suffix())).unwrap();
        computers
            .create(
                NewComputer {
                    id: id.clone(),
                    kind: ComputerKind::Team {
                        workspace: WorkspaceId::new(format!("ws-{}", testing::random_suffix()))
                            .unwrap(),
                    },
                    provider: "local".into(),
                    token_hash: TokenHash::of("t"),
                    limits: Default::default(),
                    placement: None,
                },
                1_000,
            )
            .await
            .unwrap();
        let idle = IdleStore::new(db.clone());
        let seen = idle.observe(&id, 1_000).await.unwrap().unwrap();
        assert_eq!(seen, Stored::default(), "a new computer has no idle marks");
        let missing = ComputerId::new("no-such-computer").unwrap();
        assert_eq!(idle.observe(&missing, 1_000).await.unwrap(), None);

        // Marks only move forward.
        idle.used(&id, 5_000).await.unwrap();
        idle.used(&id, 4_000).await.unwrap();
        idle.keep_awake(&id, 90_000).await.unwrap();
        idle.keep_awake(&id, 80_000).await.unwrap();
        let seen = idle.observe(&id, 6_000).await.unwrap().unwrap();
        assert_eq!((seen.active_at_ms, seen.awake_until_ms), (5_000, 90_000));

        // Leases: one running, one waiting for a takeover with its own lease, one waiting mark
        // left by an older lease of the same bot (it does not count), one lapsed.
        let leases = SqlLeaseStore::new(db.clone());
        let live = LiveStore::new(db.clone());
        let bot = |s: &str| BotId::new(s).unwrap();
        let ttl = Duration::from_secs(60);
        leases
            .acquire(&id, &bot("a-run"), "r1", ttl, 6_000)
            .await
            .unwrap();
        let w = leases
            .acquire(&id, &bot("b-wait"), "r2", ttl, 6_000)
            .await
            .unwrap();
        live.set_waiting_takeover(&id, &bot("b-wait"), Some(&w.token))
            .await
            .unwrap();
        let old = leases
            .acquire(&id, &bot("c-old"), "r3", ttl, 6_000)
            .await
            .unwrap();
        live.set_waiting_takeover(&id, &bot("c-old"), Some(&old.token))
            .await
            .unwrap();
        leases
            .acquire(&id, &bot("c-old"), "r3", ttl, 6_001)
            .await
            .unwrap();
        leases
            .acquire(
                &id,
                &bot("d-lapsed"),
                "r4",
                Duration::from_millis(10),
                6_000,
            )
            .await
            .unwrap();
        live.take_control(&id, &bot("e-user"), ttl, 6_000)
            .await
            .unwrap();
        let seen = idle.observe(&id, 7_000).await.unwrap().unwrap();
        let runs: Vec<(&str, bool)> = seen
            .runs
            .iter()
            .map(|r| (r.bot.as_str(), r.waiting_takeover))
            .collect();
        assert_eq!(
            runs,
            vec![("a-run", false), ("b-wait", true), ("c-old", false)]
        );
        assert_eq!(seen.control, vec!["e-user".to_string()]);
        // Everything lapses.
        let later = idle.observe(&id, 100_000).await.unwrap().unwrap();
        assert!(later.runs.is_empty() && later.control.is_empty());
    }

    #[tokio::test]
    async fn idle_store_on_sqlite() {
        store_rules(testing::sqlite().await.unwrap()).await;
    }

    #[tokio::test]
    async fn idle_store_on_postgres() {
        store_rules(testing::postgres(testing::DEFAULT_PG_URL).await.unwrap()).await;
    }
}
