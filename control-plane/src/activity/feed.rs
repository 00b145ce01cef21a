//! Following a computer's feed live: a server-sent event stream of every event after a `seq`.
//!
//! Events are always read from the database, so a follower sees exactly what is stored, in
//! `seq` order, whichever replica recorded it. It is woken at once by events recorded in this
//! process ([`Activity::subscribe`]) and otherwise looks every [`POLL`] (events of other
//! replicas on the same PostgreSQL). It ends when its client goes away.

use super::store::{Order, PageQuery};
use super::Activity;
use crate::schema::activity::ActivityEvent;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tracing::debug;

/// How often a follower looks in the database for events recorded by another replica.
pub const POLL: Duration = Duration::from_secs(1);
/// A comment line this often keeps proxies from closing a quiet stream.
pub const KEEPALIVE: Duration = Duration::from_secs(15);
/// Events read per look.
const BATCH: u32 = 200;

type Out = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// One event as a server-sent event.
pub fn sse(event: &ActivityEvent) -> Bytes {
    let json = serde_json::to_string(event).unwrap_or_default();
    Bytes::from(format!(
        "id: {}\nevent: activity\ndata: {json}\n\n",
        event.seq
    ))
}

/// Sends `computer`'s events after `after` to `out` as they are recorded, until `out` closes.
pub async fn follow(activity: Arc<Activity>, computer: String, mut after: u64, out: Out) {
    let mut woken = activity.subscribe();
    // The stream is open from the first byte: a client knows it is following.
    if out
        .send(Ok(Bytes::from_static(b": following\n\n")))
        .await
        .is_err()
    {
        return;
    }
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    loop {
        let q = PageQuery {
            after,
            before: None,
            limit: BATCH,
            order: Order::OldestFirst,
        };
        match activity.store.page(&computer, q).await {
            Ok(events) => {
                let full = events.len() == BATCH as usize;
                for e in &events {
                    if out.send(Ok(sse(e))).await.is_err() {
                        return;
                    }
                    after = e.seq;
                }
                if full {
                    continue;
                }
            }
            Err(e) => {
                // Passing (a busy database): the next look tries again.
                debug!(computer_id = %computer, error = %crate::homes::chain(&e), "activity follower could not read the feed");
            }
        }
        // Wait for an event of this computer here, the poll, a keepalive, or the client leaving.
        let poll = tokio::time::sleep(POLL);
        tokio::pin!(poll);
        loop {
            tokio::select! {
                got = woken.recv() => match got {
                    Ok(id) if *id == *computer => break,
                    Ok(_) => continue,
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                },
                () = &mut poll => break,
                _ = keepalive.tick() => {
                    if out.send(Ok(Bytes::from_static(b": keepalive\n\n"))).await.is_err() {
                        return;
                    }
                }
                () = out.closed() => return,
            }
        }
    }
}
