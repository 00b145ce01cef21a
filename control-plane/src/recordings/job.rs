//! The recording job: every [`PERIOD`], each recorded computer whose guest is connected to this
//! replica has each live screen's recording pulled ([`gateway_proto::recording::RecordingPull`])
//! and stored; every [`EXPIRE_EVERY`], pieces older than the retention go.
//!
//! Only the replica holding a guest's tunnel pulls from it, so two replicas never store the
//! same records. A computer is pulled by one task at a time; every call has a deadline, so a
//! guest that answers slowly or never holds up only its own recording.

use crate::clock::now_ms;
use crate::core::Core;
use crate::guest::Guest;
use gateway_proto::op::ScreenListRequest;
use gateway_proto::recording::{records, RecordingPull, MAX_PULL_BYTES};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};

/// Time between pulls (the guest's recorder stops when nobody pulls for a minute).
pub const PERIOD: Duration = Duration::from_secs(2);
/// Time between expiries.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(60);
/// Deadline of each call to a guest.
const CALL_DEADLINE: Duration = Duration::from_secs(20);
/// Bytes asked for per pull.
const PULL_BYTES: u32 = MAX_PULL_BYTES / 2;
/// Most pulls per bot and round (a backlog is taken over the next rounds).
const PULLS_PER_ROUND: usize = 8;

/// Where each bot's pull left off: (session, last record taken).
type Cursors = Arc<Mutex<HashMap<(String, String), (String, u64)>>>;

/// Starts the job.
pub fn spawn(core: Arc<Core>) {
    tokio::spawn(async move {
        let cursors: Cursors = Arc::default();
        let busy: Arc<Mutex<HashSet<String>>> = Arc::default();
        let mut expired_at = crate::clock::monotonic();
        loop {
            tokio::time::sleep(PERIOD).await;
            round(&core, &cursors, &busy).await;
            if expired_at.elapsed() >= EXPIRE_EVERY {
                expired_at = crate::clock::monotonic();
                expire(&core).await;
            }
        }
    });
}

async fn round(core: &Arc<Core>, cursors: &Cursors, busy: &Arc<Mutex<HashSet<String>>>) {
    let ids = match core.recordings.enabled().await {
        Ok(ids) => ids,
        Err(e) => {
            warn!(error = %e, "recordings: cannot list the recorded computers");
            return;
        }
    };
    for id in ids {
        // Only the replica the guest is connected to.
        let Some(conn) = core.registry.get(&id) else {
            continue;
        };
        if !busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone())
        {
            continue;
        }
        let guest: Guest = conn.into();
        let (core, cursors, busy) = (core.clone(), cursors.clone(), busy.clone());
        tokio::spawn(async move {
            pull_computer(&core, &guest, &id, &cursors).await;
            busy.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        });
    }
}

async fn pull_computer(core: &Core, guest: &Guest, id: &str, cursors: &Cursors) {
    let screens = match tokio::time::timeout(CALL_DEADLINE, guest.call(ScreenListRequest)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            debug!(computer_id = %id, error = %e, "recordings: no screen list");
            return;
        }
        Err(_) => {
            warn!(computer_id = %id, "recordings: the guest did not list its screens in time");
            return;
        }
    };
    for s in screens {
        let bot = s.bot.to_string();
        for _ in 0..PULLS_PER_ROUND {
            match pull_once(core, guest, id, &s.bot, &bot, cursors).await {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    warn!(computer_id = %id, bot = %bot, error = %e, "recordings: pull failed");
                    break;
                }
            }
        }
    }
}

/// One pull of one bot; answers whether more may be waiting.
async fn pull_once(
    core: &Core,
    guest: &Guest,
    id: &str,
    bot_id: &gateway_proto::BotId,
    bot: &str,
    cursors: &Cursors,
) -> anyhow::Result<bool> {
    let key = (id.to_string(), bot.to_string());
    let cached = cursors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let cursor = match cached {
        Some(c) => Some(c),
        None => core.recordings.cursor(id, bot).await?,
    };
    let (session, after) = match cursor {
        Some((s, a)) => (Some(s), a),
        None => (None, 0),
    };
    let req = RecordingPull {
        bot: bot_id.clone(),
        session,
        after,
        max_bytes: PULL_BYTES,
    };
    let (chunk, bytes) = tokio::time::timeout(CALL_DEADLINE, guest.recording_pull(req))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {CALL_DEADLINE:?}"))??;
    // The guest is untrusted: its bytes must be exactly the records it says.
    let mut n = 0u64;
    for r in records(&bytes) {
        r.map_err(|e| anyhow::anyhow!("the guest sent a bad record: {e}"))?;
        n += 1;
    }
    if n != chunk.next - chunk.first {
        anyhow::bail!(
            "the guest sent {n} records for {}..{}",
            chunk.first,
            chunk.next
        );
    }
    let more = bytes.len() as u64 >= u64::from(PULL_BYTES);
    if n > 0 {
        let piece = core
            .recordings
            .add(
                id,
                bot,
                &chunk.session,
                (chunk.first, chunk.next),
                chunk.lost,
                bytes,
            )
            .await?;
        if chunk.lost > 0 {
            info!(computer_id = %id, bot = %bot, lost = chunk.lost, "recordings: the guest dropped records before these");
        }
        debug!(computer_id = %id, bot = %bot, piece = %piece.name, bytes = piece.bytes, "recordings: stored");
    }
    cursors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, (chunk.session, chunk.next.saturating_sub(1)));
    Ok(more)
}

async fn expire(core: &Core) {
    let before =
        now_ms() - i64::try_from(core.recordings.retention.as_millis()).unwrap_or(i64::MAX);
    match core.recordings.expire(before).await {
        Ok(0) => {}
        Ok(n) => info!(pieces = n, "recordings: expired pieces deleted"),
        Err(e) => warn!(error = %e, "recordings: expiry failed"),
    }
}
