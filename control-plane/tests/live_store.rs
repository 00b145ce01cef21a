//! The live state store (screen generations, control leases, `waiting_takeover`) on SQLite and
//! on the real PostgreSQL at `RAKAZO_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), each case in a fresh schema or file.

use control_plane::computers::ComputerId;
use control_plane::db::Db;
use control_plane::lease::{LeaseStore, SqlLeaseStore, EXEC_LEASE_TTL};
use control_plane::live::store::{LiveStore, LiveStoreError, CONTROL_LEASE_TTL};
use gateway_proto::BotId;

const T0: i64 = 1_800_000_000_000;
const CONTROL_MS: i64 = 15 * 60 * 1000;

#[macro_use]
mod common;

fn ids() -> (ComputerId, BotId) {
    (
        ComputerId::new("c-live").expect("computer id"),
        BotId::new("bot-1").expect("bot id"),
    )
}

async fn generations_only_go_up(db: Db) {
    let store = LiveStore::new(db);
    let (c, b) = ids();
    let other = BotId::new("bot-2").unwrap();
    assert_eq!(store.get(&c, &b).await.unwrap().screen_generation, 0);
    assert_eq!(store.bump_generation(&c, &b).await.unwrap(), 1);
    assert_eq!(store.bump_generation(&c, &b).await.unwrap(), 2);
    assert_eq!(store.get(&c, &b).await.unwrap().screen_generation, 2);
    assert_eq!(
        store.get(&c, &other).await.unwrap().screen_generation,
        0,
        "per bot"
    );
}

async fn control_lease_lifecycle(db: Db) {
    let store = LiveStore::new(db);
    let (c, b) = ids();
    let first = store
        .take_control(&c, &b, CONTROL_LEASE_TTL, T0)
        .await
        .unwrap();
    assert_eq!(first.expires_at_ms, T0 + CONTROL_MS);
    assert!(gateway_proto::live::valid_control_lease_id(&first.id));
    // Taking it again while live extends it and keeps its id.
    let again = store
        .take_control(&c, &b, CONTROL_LEASE_TTL, T0 + 1000)
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again.expires_at_ms, T0 + 1000 + CONTROL_MS);
    let live = store.get(&c, &b).await.unwrap();
    assert_eq!(live.control_at(T0 + 2000), Some(&again));
    assert_eq!(
        live.control_at(again.expires_at_ms),
        None,
        "expiry is exclusive"
    );
    // After it lapses a new grant gets a new id.
    let later = store
        .take_control(&c, &b, CONTROL_LEASE_TTL, again.expires_at_ms)
        .await
        .unwrap();
    assert_ne!(later.id, first.id);
    assert_eq!(
        store.release_control(&c, &b).await.unwrap(),
        Some(later.clone())
    );
    assert_eq!(store.get(&c, &b).await.unwrap().control, None);
    assert_eq!(store.release_control(&c, &b).await.unwrap(), None);
}

async fn takeover_refused_while_a_run_holds_the_lease(db: Db) {
    let leases = SqlLeaseStore::new(db.clone());
    let store = LiveStore::new(db);
    let (c, b) = ids();
    let run = leases
        .acquire(&c, &b, "run-1", EXEC_LEASE_TTL, T0)
        .await
        .unwrap();
    let err = store
        .take_control(&c, &b, CONTROL_LEASE_TTL, T0 + 1)
        .await
        .unwrap_err();
    assert!(matches!(err, LiveStoreError::BotRunning { .. }), "{err:?}");
    assert!(err.to_string().contains("Stop the bot first"));
    // The run asks for protected input: allowed.
    store
        .set_waiting_takeover(&c, &b, Some(&run.token))
        .await
        .unwrap();
    store
        .take_control(&c, &b, CONTROL_LEASE_TTL, T0 + 2)
        .await
        .expect("a waiting run allows takeover");
    store.release_control(&c, &b).await.unwrap();
    // The mark belongs to that lease: the run's next lease is not waiting.
    leases.release(&c, &b, &run.token, T0 + 3).await.unwrap();
    leases
        .acquire(&c, &b, "run-2", EXEC_LEASE_TTL, T0 + 4)
        .await
        .unwrap();
    let err = store
        .take_control(&c, &b, CONTROL_LEASE_TTL, T0 + 5)
        .await
        .unwrap_err();
    assert!(matches!(err, LiveStoreError::BotRunning { .. }), "{err:?}");
    // A lapsed run lease does not block.
    store
        .take_control(&c, &b, CONTROL_LEASE_TTL, T0 + 4 + 5 * 60 * 1000)
        .await
        .expect("a lapsed lease does not block");
}

on_both_databases!(
    generations_only_go_up,
    control_lease_lifecycle,
    takeover_refused_while_a_run_holds_the_lease,
);
