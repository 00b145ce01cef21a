//! `ComputerStore` against SQLite (a temp file) and the real PostgreSQL at `RAKAZO_TEST_PG_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`), each case on a fresh database. Every case
//! is written once and run on both; PostgreSQL is required, and an unreachable one fails the
//! cases with its URL.

use control_plane::computers::{
    new_computer_id, new_token, Computer, ComputerError, ComputerId, ComputerKind, ComputerState,
    ComputerStore, NewComputer, TokenHash, WorkspaceId,
};
use control_plane::db::{Db, DbError};
use gateway_proto::BotId;

#[macro_use]
mod common;

const T0: i64 = 1_700_000_000_000;

fn team(ws: &str) -> ComputerKind {
    ComputerKind::Team {
        workspace: WorkspaceId::new(ws).unwrap(),
    }
}

fn private(bot: &str) -> ComputerKind {
    ComputerKind::Private {
        bot: BotId::new(bot).unwrap(),
    }
}

fn new(id: &str, kind: ComputerKind, token: &str) -> NewComputer {
    NewComputer {
        id: ComputerId::new(id).unwrap(),
        kind,
        provider: "docker".into(),
        token_hash: TokenHash::of(token),
        limits: Default::default(),
        placement: None,
    }
}

fn id(s: &str) -> ComputerId {
    ComputerId::new(s).unwrap()
}

/// Creates computer `id`, which must be accepted.
async fn create(
    store: &ComputerStore,
    id: &str,
    kind: ComputerKind,
    token: &str,
    now_ms: i64,
) -> Computer {
    store.create(new(id, kind, token), now_ms).await.unwrap()
}

/// Moves computer `id` to `state`, which must be accepted.
async fn set_state(
    store: &ComputerStore,
    id: &ComputerId,
    state: ComputerState,
    now_ms: i64,
) -> Computer {
    store.set_state(id, state, now_ms).await.unwrap()
}

async fn create_and_get(db: Db) {
    let store = ComputerStore::new(db);
    let created = create(&store, "c-1", team("ws-1"), "tok", T0).await;
    assert_eq!(
        created,
        Computer {
            id: id("c-1"),
            kind: team("ws-1"),
            home_key: "team-ws-1".into(),
            provider: "docker".into(),
            provider_ref: None,
            state: ComputerState::Provisioning,
            connected: false,
            last_seen_at_ms: None,
            screen_generation: 0,
            created_at_ms: T0,
            updated_at_ms: T0,
            limits: Default::default(),
            placement: None,
        }
    );
    assert_eq!(store.get(&id("c-1")).await.unwrap(), Some(created));

    let p = create(&store, "c-2", private("bot.a"), "tok2", T0 + 1).await;
    assert_eq!(p.kind, private("bot.a"));
    assert_eq!(p.home_key, "bot.a");
    assert_eq!(store.get(&id("c-2")).await.unwrap(), Some(p));
    assert_eq!(store.get(&id("c-none")).await.unwrap(), None);
}

async fn duplicate_id_is_refused(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    let err = store
        .create(new("c-1", team("ws-2"), "b"), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ComputerError::AlreadyExists(i) if i == &id("c-1")),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "computer c-1 already exists");
}

async fn one_live_computer_per_home(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    let err = store
        .create(new("c-2", team("ws-1"), "b"), T0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ComputerError::HomeInUse { home_key, .. } if home_key == "team-ws-1"),
        "{err:?}"
    );
    create(&store, "c-3", private("bot-1"), "c", T0).await;
    let err = store
        .create(new("c-4", private("bot-1"), "d"), T0)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::HomeInUse { .. }), "{err:?}");
    // A replacement may be created once the old computer is destroyed.
    set_state(&store, &id("c-1"), ComputerState::Destroyed, T0 + 1).await;
    create(&store, "c-2", team("ws-1"), "b", T0 + 2).await;
}

async fn invalid_inputs_are_refused(db: Db) {
    let store = ComputerStore::new(db);
    let err = store
        .create(new("c-1", private("team-x"), "a"), T0)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::ReservedBotId(_)), "{err:?}");
    let mut bad = new("c-1", team("ws"), "a");
    bad.provider = "no spaces".into();
    let err = store.create(bad, T0).await.unwrap_err();
    assert!(matches!(err, ComputerError::BadProvider(_)), "{err:?}");
    assert_eq!(store.list().await.unwrap(), vec![]);
}

async fn list_skips_destroyed_oldest_first(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-b", team("ws-b"), "b", T0 + 30).await;
    create(&store, "c-a", team("ws-a"), "a", T0 + 10).await;
    create(&store, "c-c", team("ws-c"), "c", T0 + 20).await;
    create(&store, "c-d", team("ws-d"), "d", T0 + 5).await;
    set_state(&store, &id("c-d"), ComputerState::Destroyed, T0 + 40).await;
    let ids: Vec<_> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, [id("c-a"), id("c-c"), id("c-b")]);
}

async fn set_state_bumps_generation_on_change(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    let c = set_state(&store, &id("c-1"), ComputerState::Running, T0 + 1).await;
    assert_eq!(
        (c.state, c.screen_generation, c.updated_at_ms),
        (ComputerState::Running, 1, T0 + 1)
    );
    let c = set_state(&store, &id("c-1"), ComputerState::Running, T0 + 2).await;
    assert_eq!(
        (c.screen_generation, c.updated_at_ms),
        (1, T0 + 2),
        "no change, no bump"
    );
    let c = set_state(&store, &id("c-1"), ComputerState::Stopped, T0 + 3).await;
    assert_eq!((c.state, c.screen_generation), (ComputerState::Stopped, 2));
    assert_eq!(store.get(&id("c-1")).await.unwrap(), Some(c));

    let err = store
        .set_state(&id("c-none"), ComputerState::Running, T0)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::NotFound(_)), "{err:?}");
    assert_eq!(err.to_string(), "computer c-none not found");
}

async fn destroyed_is_terminal(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    let gone = set_state(&store, &id("c-1"), ComputerState::Destroyed, T0 + 1).await;
    assert_eq!(
        (gone.state, gone.screen_generation),
        (ComputerState::Destroyed, 1)
    );
    let again = set_state(&store, &id("c-1"), ComputerState::Destroyed, T0 + 2).await;
    assert_eq!(again, gone, "destroying again is a no-op");
    let err = store
        .set_state(&id("c-1"), ComputerState::Running, T0 + 3)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::Destroyed(_)), "{err:?}");
    // Still readable by id.
    assert_eq!(store.get(&id("c-1")).await.unwrap(), Some(gone));
}

async fn set_provider_ref_bumps_generation_on_change(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    let c = store
        .set_provider_ref(&id("c-1"), Some("ctr-1"), T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        (c.provider_ref.as_deref(), c.screen_generation),
        (Some("ctr-1"), 1)
    );
    let c = store
        .set_provider_ref(&id("c-1"), Some("ctr-1"), T0 + 2)
        .await
        .unwrap();
    assert_eq!((c.screen_generation, c.updated_at_ms), (1, T0 + 2));
    let c = store
        .set_provider_ref(&id("c-1"), Some("ctr-2"), T0 + 3)
        .await
        .unwrap();
    assert_eq!(
        (c.provider_ref.as_deref(), c.screen_generation),
        (Some("ctr-2"), 2)
    );
    let c = store
        .set_provider_ref(&id("c-1"), None, T0 + 4)
        .await
        .unwrap();
    assert_eq!((c.provider_ref, c.screen_generation), (None, 3));
    let c = store
        .set_provider_ref(&id("c-1"), None, T0 + 5)
        .await
        .unwrap();
    assert_eq!(c.screen_generation, 3);
    let err = store
        .set_provider_ref(&id("c-none"), None, T0)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::NotFound(_)), "{err:?}");
}

async fn connection_tracking(db: Db) {
    let store = ComputerStore::new(db);
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    create(&store, "c-2", team("ws-2"), "b", T0).await;
    create(&store, "c-3", team("ws-3"), "c", T0).await;
    store.set_connected(&id("c-1"), true, T0 + 1).await.unwrap();
    store.set_connected(&id("c-2"), true, T0 + 2).await.unwrap();
    let c1 = store.get(&id("c-1")).await.unwrap().unwrap();
    assert_eq!((c1.connected, c1.last_seen_at_ms), (true, Some(T0 + 1)));
    store
        .set_connected(&id("c-1"), false, T0 + 3)
        .await
        .unwrap();
    let c1 = store.get(&id("c-1")).await.unwrap().unwrap();
    assert_eq!((c1.connected, c1.last_seen_at_ms), (false, Some(T0 + 3)));
    store.set_connected(&id("c-1"), true, T0 + 4).await.unwrap();

    assert_eq!(store.mark_all_disconnected(T0 + 5).await.unwrap(), 2);
    for c in store.list().await.unwrap() {
        assert!(!c.connected, "{} still connected", c.id);
    }
    let c2 = store.get(&id("c-2")).await.unwrap().unwrap();
    assert_eq!(
        (c2.last_seen_at_ms, c2.updated_at_ms),
        (Some(T0 + 2), T0 + 5)
    );
    assert_eq!(store.mark_all_disconnected(T0 + 6).await.unwrap(), 0);

    let err = store
        .set_connected(&id("c-none"), true, T0)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::NotFound(_)), "{err:?}");
}

async fn verify_token_checks_the_hash(db: Db) {
    let store = ComputerStore::new(db.clone());
    let token = new_token();
    let cid = new_computer_id();
    store
        .create(
            NewComputer {
                id: cid.clone(),
                kind: team("ws-1"),
                provider: "local".into(),
                token_hash: TokenHash::of(token.expose()),
                limits: Default::default(),
                placement: None,
            },
            T0,
        )
        .await
        .unwrap();
    assert!(store.verify_token(&cid, token.expose()).await.unwrap());
    assert!(!store.verify_token(&cid, "").await.unwrap());
    assert!(!store
        .verify_token(&cid, new_token().expose())
        .await
        .unwrap());
    assert!(!store
        .verify_token(&id("c-none"), token.expose())
        .await
        .unwrap());

    // Only the hash is stored.
    let stored: Vec<String> = sqlx::query_scalar("SELECT token_hash FROM computers")
        .fetch_all(db.pool())
        .await
        .unwrap();
    assert_eq!(
        stored,
        vec![TokenHash::of(token.expose()).as_str().to_owned()]
    );

    // A re-issued token replaces the old one.
    let reissued = new_token();
    store
        .set_token_hash(&cid, &TokenHash::of(reissued.expose()), T0 + 1)
        .await
        .unwrap();
    assert!(store.verify_token(&cid, reissued.expose()).await.unwrap());
    assert!(!store.verify_token(&cid, token.expose()).await.unwrap());
    let err = store
        .set_token_hash(&id("c-none"), &TokenHash::of("x"), T0)
        .await
        .unwrap_err();
    assert!(matches!(err, ComputerError::NotFound(_)), "{err:?}");

    set_state(&store, &cid, ComputerState::Destroyed, T0 + 2).await;
    assert!(
        !store.verify_token(&cid, reissued.expose()).await.unwrap(),
        "destroyed"
    );
}

async fn corrupt_rows_are_errors(db: Db) {
    let store = ComputerStore::new(db.clone());
    create(&store, "c-1", team("ws-1"), "a", T0).await;
    sqlx::query("UPDATE computers SET connected = 7 WHERE id = 'c-1'")
        .execute(db.pool())
        .await
        .unwrap();
    let err = store.get(&id("c-1")).await.unwrap_err();
    assert!(
        matches!(&err, ComputerError::Db(DbError::Corrupt { key, .. }) if key == "c-1"),
        "{err:?}"
    );
    sqlx::query("UPDATE computers SET connected = 0, home_key = 'team-other' WHERE id = 'c-1'")
        .execute(db.pool())
        .await
        .unwrap();
    let err = store.list().await.unwrap_err();
    assert!(
        matches!(err, ComputerError::Db(DbError::Corrupt { .. })),
        "{err:?}"
    );
}

async fn limits_are_kept_and_a_provider_change_drops_the_reference(db: Db) {
    let store = ComputerStore::new(db);
    let limits = providers::MachineLimits {
        memory_mb: Some(2048),
        cpu_millis: Some(1500),
        pids: None,
        shm_mb: Some(256),
    };
    let mut n = new("c-1", team("ws-1"), "a");
    n.limits = limits;
    store.create(n, T0).await.unwrap();
    let c = store.get(&id("c-1")).await.unwrap().unwrap();
    assert_eq!(c.limits, limits);
    store
        .set_provider_ref(&id("c-1"), Some("abc"), T0 + 1)
        .await
        .unwrap();
    let before = store.get(&id("c-1")).await.unwrap().unwrap();
    store
        .set_provider(&id("c-1"), "local", T0 + 2)
        .await
        .unwrap();
    let after = store.get(&id("c-1")).await.unwrap().unwrap();
    assert_eq!(after.provider, "local");
    assert_eq!(
        after.provider_ref, None,
        "a reference means nothing to another kind"
    );
    assert_eq!(after.screen_generation, before.screen_generation + 1);
    assert_eq!(after.limits, limits);
    assert!(matches!(
        store.set_provider(&id("c-1"), "bad kind!", T0 + 3).await,
        Err(ComputerError::BadProvider(_))
    ));
}

async fn placement_is_kept_checked_and_dropped_with_the_provider(db: Db) {
    let store = ComputerStore::new(db.clone());
    let mut n = new("c-1", team("ws-1"), "a");
    n.placement = Some("engine-b".into());
    let c = store.create(n, T0).await.unwrap();
    assert_eq!(c.placement.as_deref(), Some("engine-b"));
    assert_eq!(store.get(&id("c-1")).await.unwrap().unwrap(), c);
    // A replacement machine is asked for at the same place: the reference changes, not it.
    store
        .set_provider_ref(&id("c-1"), Some("engine-b/abc"), T0 + 1)
        .await
        .unwrap();
    let c = store.get(&id("c-1")).await.unwrap().unwrap();
    assert_eq!(c.placement.as_deref(), Some("engine-b"));
    // Another kind knows no such place.
    store
        .set_provider(&id("c-1"), "local", T0 + 2)
        .await
        .unwrap();
    let c = store.get(&id("c-1")).await.unwrap().unwrap();
    assert_eq!(c.placement, None);

    for bad in ["", "Engine", "a/b", &"a".repeat(64)] {
        let mut n = new("c-2", team("ws-2"), "b");
        n.placement = Some(bad.to_string());
        let err = store.create(n, T0).await.unwrap_err();
        assert!(
            matches!(&err, ComputerError::BadPlacement(p) if p == bad),
            "{bad:?}: {err:?}"
        );
    }
    assert_eq!(store.get(&id("c-2")).await.unwrap(), None);

    // A malformed placement in the table is corruption, not a place to go.
    create(&store, "c-3", team("ws-3"), "c", T0).await;
    sqlx::query("UPDATE computers SET placement = '../x' WHERE id = 'c-3'")
        .execute(db.pool())
        .await
        .unwrap();
    let err = store.get(&id("c-3")).await.unwrap_err();
    assert!(
        matches!(err, ComputerError::Db(DbError::Corrupt { .. })),
        "{err:?}"
    );
}

async fn futures_are_send(db: Db) {
    // The API and tunnel call the store from spawned tasks.
    let store = ComputerStore::new(db);
    let task = tokio::spawn(async move {
        store.create(new("c-1", team("ws-1"), "a"), T0).await?;
        store.set_connected(&id("c-1"), true, T0).await?;
        store.verify_token(&id("c-1"), "a").await
    });
    assert!(task.await.unwrap().unwrap());
}

on_both_databases!(
    create_and_get,
    duplicate_id_is_refused,
    one_live_computer_per_home,
    invalid_inputs_are_refused,
    list_skips_destroyed_oldest_first,
    set_state_bumps_generation_on_change,
    destroyed_is_terminal,
    set_provider_ref_bumps_generation_on_change,
    connection_tracking,
    verify_token_checks_the_hash,
    corrupt_rows_are_errors,
    limits_are_kept_and_a_provider_change_drops_the_reference,
    placement_is_kept_checked_and_dropped_with_the_provider,
    futures_are_send,
);
