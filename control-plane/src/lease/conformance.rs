//! The behaviour every [`LeaseStore`] must show, one function per case. Run them all with
//! [`lease_conformance!`](crate::lease_conformance). Cases panic on failure, like tests do.

use super::*;
use std::sync::Arc;

const T0: i64 = 1_700_000_000_000;
const TTL: Duration = EXEC_LEASE_TTL;
const TTL_MS: i64 = 5 * 60 * 1000;

fn computer() -> ComputerId {
    ComputerId::new("c-conformance").expect("valid computer id")
}

fn bot() -> BotId {
    BotId::new("bot-1").expect("valid bot id")
}

fn token(owner: &str, fence: u64) -> LeaseToken {
    LeaseToken::new(owner, fence).expect("valid token")
}

async fn fence_now<S: LeaseStore>(store: &S, now_ms: i64) -> Option<u64> {
    get(store, now_ms).await.map(|l| l.token.fence())
}

/// The suite's lease at `now_ms`.
async fn get<S: LeaseStore>(store: &S, now_ms: i64) -> Option<Lease> {
    store.get(&computer(), &bot(), now_ms).await.expect("get")
}

/// `owner` takes the suite's lease at `now_ms`, which must be granted.
async fn acquire<S: LeaseStore>(store: &S, owner: &str, now_ms: i64) -> Lease {
    let granted = store.acquire(&computer(), &bot(), owner, TTL, now_ms).await;
    granted.unwrap_or_else(|e| panic!("{owner} acquires at {now_ms}: {e:?}"))
}

/// `token` gives the suite's lease back at `now_ms`, which must succeed.
async fn release<S: LeaseStore>(store: &S, token: &LeaseToken, now_ms: i64) {
    let released = store.release(&computer(), &bot(), token, now_ms).await;
    released.unwrap_or_else(|e| panic!("{token} releases at {now_ms}: {e:?}"));
}

pub async fn acquire_free<S: LeaseStore>(store: Arc<S>) {
    assert_eq!(get(&*store, T0).await, None);
    let lease = acquire(&*store, "run-a", T0).await;
    assert_eq!(lease.computer, computer());
    assert_eq!(lease.bot, bot());
    assert_eq!(lease.token, token("run-a", 1));
    assert_eq!(lease.expires_at_ms, T0 + TTL_MS);
    assert_eq!(get(&*store, T0 + 1).await, Some(lease));
}

pub async fn fence_increments_across_acquires<S: LeaseStore>(store: Arc<S>) {
    let a = acquire(&*store, "run-a", T0).await;
    assert_eq!(a.token.fence(), 1);
    release(&*store, &a.token, T0 + 1).await;
    let b2 = acquire(&*store, "run-b", T0 + 2).await;
    assert_eq!(
        b2.token.fence(),
        2,
        "release keeps the fence; acquire bumps it"
    );
    // b's claim lapses and c takes over.
    let t = T0 + 2 + TTL_MS;
    let c3 = acquire(&*store, "run-c", t).await;
    assert_eq!(c3.token.fence(), 3);
    release(&*store, &c3.token, t + 1).await;
    let a4 = acquire(&*store, "run-a", t + 2).await;
    assert_eq!(a4.token, token("run-a", 4));
}

pub async fn same_owner_reacquire_bumps_fence<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let first = acquire(&*store, "run-a", T0).await;
    let second = acquire(&*store, "run-a", T0 + 10).await;
    assert_eq!(second.token, token("run-a", first.token.fence() + 1));
    assert_eq!(second.expires_at_ms, T0 + 10 + TTL_MS);
    // The earlier grant is now stale.
    let err = store
        .renew(&c, &b, &first.token, TTL, T0 + 20)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
}

pub async fn held_by_other_is_refused<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    // Still live one millisecond before expiry.
    let err = store
        .acquire(&c, &b, "run-b", TTL, a.expires_at_ms - 1)
        .await
        .unwrap_err();
    match err {
        LeaseError::Held {
            computer,
            bot,
            owner,
            expires_at,
        } => {
            assert_eq!((computer, bot), (c.clone(), b.clone()));
            assert_eq!(owner, "run-a");
            assert_eq!(expires_at, a.expires_at_ms);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    // The refusal changed nothing.
    assert_eq!(get(&*store, T0 + 1).await, Some(a));
}

pub async fn expired_lease_is_taken_with_higher_fence<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    // Expiry is exclusive: at expires_at the claim has lapsed.
    assert_eq!(fence_now(&*store, a.expires_at_ms).await, None);
    let taken = acquire(&*store, "run-b", a.expires_at_ms).await;
    assert_eq!(taken.token, token("run-b", a.token.fence() + 1));
    let err = store
        .renew(&c, &b, &a.token, TTL, a.expires_at_ms + 1)
        .await
        .unwrap_err();
    match err {
        LeaseError::Mismatch {
            presented, holder, ..
        } => {
            assert_eq!(presented, a.token);
            assert_eq!(holder, Some(taken.token));
        }
        other => panic!("expected Mismatch, got {other:?}"),
    }
}

pub async fn renew_by_holder_extends<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    let renewed = store
        .renew(&c, &b, &a.token, TTL, T0 + 60_000)
        .await
        .expect("the holder renews");
    assert_eq!(renewed.token, a.token, "renewal keeps the fence");
    assert_eq!(renewed.expires_at_ms, T0 + 60_000 + TTL_MS);
    // Live past the original expiry.
    assert_eq!(fence_now(&*store, a.expires_at_ms + 1).await, Some(1));
}

pub async fn renew_with_wrong_owner_is_refused<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    let forged = token("run-b", a.token.fence());
    let err = store.renew(&c, &b, &forged, TTL, T0 + 1).await.unwrap_err();
    match err {
        LeaseError::Mismatch {
            computer,
            bot,
            presented,
            holder,
        } => {
            assert_eq!((computer, bot), (c.clone(), b.clone()));
            assert_eq!(presented, forged);
            assert_eq!(holder, Some(a.token.clone()));
        }
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert_eq!(get(&*store, T0 + 2).await, Some(a));
}

pub async fn renew_with_old_fence_is_refused<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a1 = acquire(&*store, "run-a", T0).await;
    release(&*store, &a1.token, T0 + 1).await;
    let a2 = acquire(&*store, "run-a", T0 + 2).await;
    let err = store
        .renew(&c, &b, &a1.token, TTL, T0 + 3)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    // A fence from the future is no better.
    let ahead = token("run-a", a2.token.fence() + 1);
    let err = store.renew(&c, &b, &ahead, TTL, T0 + 3).await.unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
}

pub async fn renew_after_expiry_is_refused<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    let err = store
        .renew(&c, &b, &a.token, TTL, a.expires_at_ms)
        .await
        .unwrap_err();
    match err {
        LeaseError::Mismatch { holder, .. } => assert_eq!(holder, None),
        other => panic!("expected Mismatch, got {other:?}"),
    }
}

pub async fn renew_of_never_acquired_is_refused<S: LeaseStore>(store: Arc<S>) {
    let err = store
        .renew(&computer(), &bot(), &token("run-a", 1), TTL, T0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LeaseError::Mismatch { holder: None, .. }),
        "{err:?}"
    );
}

pub async fn release_by_owner_frees<S: LeaseStore>(store: Arc<S>) {
    let a = acquire(&*store, "run-a", T0).await;
    release(&*store, &a.token, T0 + 1).await;
    assert_eq!(get(&*store, T0 + 2).await, None);
    let next = acquire(&*store, "run-b", T0 + 3).await;
    assert_eq!(next.token.fence(), 2);
}

pub async fn release_of_lapsed_claim_by_owner_frees<S: LeaseStore>(store: Arc<S>) {
    let a = acquire(&*store, "run-a", T0).await;
    // The owner may release a lapsed claim nobody took.
    release(&*store, &a.token, a.expires_at_ms + 10).await;
}

pub async fn release_by_other_owner_is_refused<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    for fence in [0, a.token.fence(), a.token.fence() + 5] {
        let other = token("run-b", fence);
        let err = store.release(&c, &b, &other, T0 + 1).await.unwrap_err();
        assert!(
            matches!(err, LeaseError::Mismatch { .. }),
            "{other}: {err:?}"
        );
    }
    assert_eq!(get(&*store, T0 + 2).await, Some(a));
}

pub async fn release_with_lower_fence_is_refused<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a1 = acquire(&*store, "run-a", T0).await;
    let a2 = acquire(&*store, "run-a", T0 + 1).await;
    let err = store.release(&c, &b, &a1.token, T0 + 2).await.unwrap_err();
    match err {
        LeaseError::Mismatch { holder, .. } => assert_eq!(holder, Some(a2.token.clone())),
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert_eq!(get(&*store, T0 + 3).await, Some(a2.clone()));
    // A fence at or above the holder's, same owner, releases.
    let higher = token("run-a", a2.token.fence() + 1);
    release(&*store, &higher, T0 + 4).await;
    assert_eq!(get(&*store, T0 + 5).await, None);
}

pub async fn viewer_token_cannot_release<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let viewer = token(&format!("screen-view-{b}"), 0);
    // Not a run's live claim, not a lapsed one, not a released one, not even nothing.
    let err = store.release(&c, &b, &viewer, T0).await.unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    let a = acquire(&*store, "run-a", T0).await;
    let err = store.release(&c, &b, &viewer, T0 + 1).await.unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    let err = store
        .release(&c, &b, &viewer, a.expires_at_ms + 1)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    assert_eq!(get(&*store, T0 + 2).await, Some(a.clone()));
    release(&*store, &a.token, T0 + 3).await;
    let err = store.release(&c, &b, &viewer, T0 + 4).await.unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
}

pub async fn release_is_idempotent<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let a = acquire(&*store, "run-a", T0).await;
    let first = store.release(&c, &b, &a.token, T0 + 1).await;
    assert_eq!(first.expect("first release"), Released::Now);
    // A repeat succeeds and says it changed nothing (the caller does not checkpoint again).
    let again = store.release(&c, &b, &a.token, T0 + 2).await;
    assert_eq!(again.expect("repeated release"), Released::Already);
    assert_eq!(get(&*store, T0 + 3).await, None);
    // Once someone else holds it again, the old token releases nothing.
    let b2 = acquire(&*store, "run-b", T0 + 4).await;
    let err = store.release(&c, &b, &a.token, T0 + 5).await.unwrap_err();
    assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    assert_eq!(get(&*store, T0 + 6).await, Some(b2));
}

pub async fn leases_are_per_computer_and_bot<S: LeaseStore>(store: Arc<S>) {
    let (c, b) = (computer(), bot());
    let c2 = ComputerId::new("c-other").expect("valid computer id");
    let b2 = BotId::new("bot-2").expect("valid bot id");
    let a = acquire(&*store, "run-a", T0).await;
    let x = store
        .acquire(&c, &b2, "run-x", TTL, T0)
        .await
        .expect("other bot");
    let y = store
        .acquire(&c2, &b, "run-y", TTL, T0)
        .await
        .expect("other computer");
    assert_eq!(
        [a.token.fence(), x.token.fence(), y.token.fence()],
        [1, 1, 1]
    );
    store
        .release(&c, &b2, &x.token, T0 + 1)
        .await
        .expect("release x");
    assert_eq!(get(&*store, T0 + 2).await, Some(a));
    assert_eq!(store.get(&c2, &b, T0 + 2).await.expect("get"), Some(y));
}

pub async fn bad_owner_is_rejected<S: LeaseStore>(store: Arc<S>) {
    for bad in ["", "run a", "run/a"] {
        let err = store
            .acquire(&computer(), &bot(), bad, TTL, T0)
            .await
            .unwrap_err();
        assert!(
            matches!(err, LeaseError::BadOwner { .. }),
            "{bad:?}: {err:?}"
        );
    }
    assert_eq!(get(&*store, T0).await, None);
}

/// How many owners race in the `concurrent_*` cases.
pub const RACERS: usize = 16;

/// Starts [`RACERS`] acquirers with different owners at once, at `now_ms`, and checks that
/// exactly one wins with fence `fence` while every other one is told who holds it.
async fn race<S: LeaseStore + 'static>(store: &Arc<S>, now_ms: i64, fence: u64) -> Lease {
    let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let owner = format!("racer-{i}");
                let result = store
                    .acquire(&computer(), &bot(), &owner, TTL, now_ms)
                    .await;
                (owner, result)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for racer in racers {
        match racer.await.expect("racer task") {
            (owner, Ok(lease)) => winners.push((owner, lease)),
            (_, Err(LeaseError::Held { owner, .. })) => losers.push(owner),
            (owner, Err(e)) => panic!("{owner} failed: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
    let (owner, lease) = &winners[0];
    assert_eq!(lease.token, token(owner, fence));
    assert_eq!(losers.len(), RACERS - 1);
    assert!(losers.iter().all(|held_by| held_by == owner), "{losers:?}");
    assert_eq!(fence_now(&**store, now_ms + 1).await, Some(fence));
    lease.clone()
}

/// Rounds per `concurrent_*` case on an existing row: a lost update only shows when the
/// racers interleave just so, so give it several chances.
const ROUNDS: u64 = 5;

/// The race for a pair never leased before (no row yet).
pub async fn concurrent_acquire_has_one_winner<S: LeaseStore + 'static>(store: Arc<S>) {
    race(&store, T0, 1).await;
}

/// The race for a released lease (the row exists and is free).
pub async fn concurrent_acquire_of_released_has_one_winner<S: LeaseStore + 'static>(store: Arc<S>) {
    let mut held = acquire(&*store, "run-a", T0).await;
    for round in 1..=ROUNDS {
        let now = T0 + 10 * round as i64;
        release(&*store, &held.token, now).await;
        held = race(&store, now + 1, round + 1).await;
    }
}

/// The race for a lapsed lease (the row exists and names a holder whose claim lapsed).
pub async fn concurrent_acquire_of_lapsed_has_one_winner<S: LeaseStore + 'static>(store: Arc<S>) {
    let mut held = acquire(&*store, "run-a", T0).await;
    for round in 1..=ROUNDS {
        held = race(&store, held.expires_at_ms, round + 1).await;
    }
}

/// Emits the [`conformance`](crate::lease::conformance) suite as one `#[tokio::test]` per case,
/// in a module `$name`.
/// `$store` is an expression evaluating to a future of the store (one fresh store per case);
/// it is expanded inside that module, so it may name items of the calling file.
///
/// ```text
/// control_plane::lease_conformance!(mem, async { MemLeaseStore::new() });
/// ```
#[macro_export]
macro_rules! lease_conformance {
    ($name:ident, $store:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::lease_conformance!(@cases $store;
                acquire_free,
                fence_increments_across_acquires,
                same_owner_reacquire_bumps_fence,
                held_by_other_is_refused,
                expired_lease_is_taken_with_higher_fence,
                renew_by_holder_extends,
                renew_with_wrong_owner_is_refused,
                renew_with_old_fence_is_refused,
                renew_after_expiry_is_refused,
                renew_of_never_acquired_is_refused,
                release_by_owner_frees,
                release_of_lapsed_claim_by_owner_frees,
                release_by_other_owner_is_refused,
                release_with_lower_fence_is_refused,
                viewer_token_cannot_release,
                release_is_idempotent,
                leases_are_per_computer_and_bot,
                bad_owner_is_rejected,
                concurrent_acquire_has_one_winner,
                concurrent_acquire_of_released_has_one_winner,
                concurrent_acquire_of_lapsed_has_one_winner,
            );
        }
    };
    (@cases $store:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let store = ::std::sync::Arc::new($store.await);
                $crate::lease::conformance::$case(store).await;
            }
        )*
    };
}
