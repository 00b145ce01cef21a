//! The feed's table (migration 0010, `activity_events`): one row per event, numbered per computer.
//! SQL follows the portability rules of [`crate::db`].
//!
//! A new event takes the computer's highest `seq` plus one in the same statement that inserts it;
//! two replicas inserting at once collide on the primary key and the loser tries again, so `seq`
//! grows in commit order and a follower reading "after my last seq" misses nothing. Each insert
//! prunes the computer's rows older than the newest `retention`.

use crate::db::{column, non_negative, Db, DbError};
use crate::schema::activity::{ActivityBody, ActivityEvent};

/// Attempts of one insert that collides with others. Each round of colliding inserts commits
/// one of them, so n inserts at once need up to n rounds: this covers every connection of a few
/// replicas' pools writing one computer's feed at once (8 did not: 16 concurrent inserts on
/// PostgreSQL under load ran out and lost an event).
const INSERT_ATTEMPTS: usize = 64;
/// Longest pause after a collision (a random part of it), so the losers do not all retry at once.
const RETRY_JITTER_US: u64 = 2_000;
/// Most events one page answers.
pub const MAX_PAGE: u32 = 500;

/// Which end of the feed a page starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    OldestFirst,
    NewestFirst,
}

/// A page to read: events with `after < seq < before`, at most `limit`, from one end.
#[derive(Debug, Clone, Copy)]
pub struct PageQuery {
    pub after: u64,
    pub before: Option<u64>,
    pub limit: u32,
    pub order: Order,
}

#[derive(Debug, Clone)]
pub struct ActivityStore {
    db: Db,
}

impl ActivityStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Appends `body` to `computer`'s feed and prunes it to `retention` events; the new `seq`.
    pub async fn insert(
        &self,
        computer: &str,
        at_ms: i64,
        body: &ActivityBody,
        retention: u32,
    ) -> Result<u64, DbError> {
        let kind = match body {
            ActivityBody::Command(_) => "command",
            ActivityBody::Lifecycle(_) => "lifecycle",
            ActivityBody::NetworkAllowed(_) | ActivityBody::NetworkDenied(_) => "network",
        };
        let json = serde_json::to_string(body)
            .map_err(|e| DbError::corrupt("activity_events", computer, e.to_string()))?;
        let mut attempt = 0;
        let seq: i64 = loop {
            attempt += 1;
            let res = sqlx::query(
                "INSERT INTO activity_events (computer_id, seq, at_ms, kind, body) \
                 SELECT $1, COALESCE(MAX(seq), 0) + 1, CAST($2 AS BIGINT), $3, $4 \
                 FROM activity_events WHERE computer_id = $1 RETURNING seq",
            )
            .bind(computer)
            .bind(at_ms)
            .bind(kind)
            .bind(&json)
            .fetch_one(self.db.pool())
            .await;
            match res {
                Ok(row) => break column(&row, "activity_events", computer, "seq")?,
                Err(sqlx::Error::Database(e))
                    if e.is_unique_violation() && attempt < INSERT_ATTEMPTS =>
                {
                    let pause = rand::random::<u64>() % RETRY_JITTER_US;
                    tokio::time::sleep(std::time::Duration::from_micros(pause)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let seq = non_negative(seq, "activity_events", computer, "seq")?;
        if let Some(oldest_kept) = seq.checked_sub(u64::from(retention)) {
            if oldest_kept > 0 {
                sqlx::query("DELETE FROM activity_events WHERE computer_id = $1 AND seq <= $2")
                    .bind(computer)
                    .bind(i64::try_from(oldest_kept).unwrap_or(i64::MAX))
                    .execute(self.db.pool())
                    .await?;
            }
        }
        Ok(seq)
    }

    /// The highest `seq` of `computer` (0: none).
    pub async fn last_seq(&self, computer: &str) -> Result<u64, DbError> {
        let row = sqlx::query(
            "SELECT COALESCE(MAX(seq), 0) AS seq FROM activity_events WHERE computer_id = $1",
        )
        .bind(computer)
        .fetch_one(self.db.pool())
        .await?;
        let seq: i64 = column(&row, "activity_events", computer, "seq")?;
        non_negative(seq, "activity_events", computer, "seq")
    }

    /// A page of `computer`'s feed.
    pub async fn page(&self, computer: &str, q: PageQuery) -> Result<Vec<ActivityEvent>, DbError> {
        let order = match q.order {
            Order::OldestFirst => "ASC",
            Order::NewestFirst => "DESC",
        };
        let sql = format!(
            "SELECT seq, at_ms, body FROM activity_events \
             WHERE computer_id = $1 AND seq > $2 AND seq < $3 ORDER BY seq {order} LIMIT $4"
        );
        let before = q
            .before
            .map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let rows = sqlx::query(&sql)
            .bind(computer)
            .bind(i64::try_from(q.after).unwrap_or(i64::MAX))
            .bind(before)
            .bind(i64::from(q.limit.min(MAX_PAGE)))
            .fetch_all(self.db.pool())
            .await?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = column(row, "activity_events", computer, "seq")?;
            let key = format!("{computer}/{seq}");
            let at_ms: i64 = column(row, "activity_events", &key, "at_ms")?;
            let body: String = column(row, "activity_events", &key, "body")?;
            let body: ActivityBody = serde_json::from_str(&body)
                .map_err(|e| DbError::corrupt("activity_events", key.clone(), e.to_string()))?;
            events.push(ActivityEvent {
                seq: non_negative(seq, "activity_events", &key, "seq")?,
                at_ms,
                body,
            });
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing;
    use crate::schema::activity::{Cause, LifecycleEvent, LifecycleKind};

    fn body(reason: &str) -> ActivityBody {
        ActivityBody::Lifecycle(LifecycleEvent {
            event: LifecycleKind::Started,
            cause: Cause::User,
            reason: reason.into(),
            revision: None,
            bytes: None,
        })
    }

    async fn numbers_pages_and_prunes(db: Db) {
        let store = ActivityStore::new(db);
        for i in 1..=7u64 {
            assert_eq!(
                store
                    .insert("c-a", 10, &body(&i.to_string()), 5)
                    .await
                    .unwrap(),
                i
            );
        }
        // Another computer's feed is numbered on its own.
        assert_eq!(store.insert("c-b", 10, &body("b"), 5).await.unwrap(), 1);
        assert_eq!(store.last_seq("c-a").await.unwrap(), 7);
        let all = |order| PageQuery {
            after: 0,
            before: None,
            limit: 100,
            order,
        };
        let seqs = |v: Vec<ActivityEvent>| v.into_iter().map(|e| e.seq).collect::<Vec<_>>();
        // Retention 5: the oldest two are gone.
        assert_eq!(
            seqs(store.page("c-a", all(Order::OldestFirst)).await.unwrap()),
            [3, 4, 5, 6, 7]
        );
        assert_eq!(
            seqs(store.page("c-a", all(Order::NewestFirst)).await.unwrap()),
            [7, 6, 5, 4, 3]
        );
        let q = PageQuery {
            after: 4,
            before: Some(7),
            limit: 1,
            order: Order::OldestFirst,
        };
        let page = store.page("c-a", q).await.unwrap();
        assert_eq!(seqs(page.clone()), [5]);
        assert_eq!(page[0].body, body("5"));
    }

    #[tokio::test]
    async fn sqlite_numbers_pages_and_prunes() {
        numbers_pages_and_prunes(testing::sqlite().await.unwrap()).await;
    }

    #[tokio::test]
    async fn postgres_numbers_pages_and_prunes() {
        numbers_pages_and_prunes(testing::postgres(testing::DEFAULT_PG_URL).await.unwrap()).await;
    }

    /// Concurrent inserts (two replicas, or one replica's tasks) each get their own seq.
    #[tokio::test]
    async fn postgres_concurrent_inserts_get_distinct_seqs() {
        let store = ActivityStore::new(testing::postgres(testing::DEFAULT_PG_URL).await.unwrap());
        let tasks: Vec<_> = (0..48)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .insert("c-x", 1, &body(&i.to_string()), 100)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut seqs = Vec::new();
        for t in tasks {
            seqs.push(t.await.unwrap());
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=48).collect::<Vec<_>>());
    }
}
