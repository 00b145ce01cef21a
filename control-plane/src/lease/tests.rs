//! Unit tests of the lease rules and the in-memory store.

use super::rules::{self, Mismatch, Refusal};
use super::*;

const NOW: i64 = 1_000_000;
const TTL_MS: i64 = 300_000;

fn tok(owner: &str, fence: u64) -> LeaseToken {
    LeaseToken::new(owner, fence).unwrap()
}

fn held(owner: &str, fence: u64, expires_at_ms: i64) -> LeaseState {
    LeaseState {
        owner: Some(owner.into()),
        fence,
        expires_at_ms,
    }
}

fn released(fence: u64) -> LeaseState {
    LeaseState {
        owner: None,
        fence,
        expires_at_ms: 0,
    }
}

#[test]
fn acquire_of_a_never_leased_pair_gets_fence_one() {
    let next = rules::acquire(&LeaseState::default(), "run", EXEC_LEASE_TTL, NOW).unwrap();
    assert_eq!(next, held("run", 1, NOW + TTL_MS));
}

#[test]
fn acquire_of_a_released_lease_bumps_the_kept_fence() {
    let next = rules::acquire(&released(7), "run", EXEC_LEASE_TTL, NOW).unwrap();
    assert_eq!(next, held("run", 8, NOW + TTL_MS));
}

#[test]
fn acquire_against_a_live_holder_is_refused() {
    let err = rules::acquire(&held("a", 3, NOW + 1), "b", EXEC_LEASE_TTL, NOW).unwrap_err();
    assert_eq!(
        err,
        Refusal::Held {
            owner: "a".into(),
            expires_at_ms: NOW + 1
        }
    );
}

#[test]
fn acquire_at_expiry_takes_over() {
    let next = rules::acquire(&held("a", 3, NOW), "b", EXEC_LEASE_TTL, NOW).unwrap();
    assert_eq!(next, held("b", 4, NOW + TTL_MS));
}

#[test]
fn acquire_by_the_holder_bumps_the_fence() {
    let next = rules::acquire(&held("a", 3, NOW + 5), "a", EXEC_LEASE_TTL, NOW).unwrap();
    assert_eq!(next, held("a", 4, NOW + TTL_MS));
}

#[test]
fn acquire_refuses_a_fence_past_bigint() {
    let max = i64::MAX as u64;
    let err = rules::acquire(&released(max), "a", EXEC_LEASE_TTL, NOW).unwrap_err();
    assert_eq!(err, Refusal::FenceExhausted);
    assert!(rules::acquire(&released(max - 1), "a", EXEC_LEASE_TTL, NOW).is_ok());
}

#[test]
fn expiry_saturates() {
    let next = rules::acquire(&LeaseState::default(), "a", Duration::MAX, NOW).unwrap();
    assert_eq!(next.expires_at_ms, i64::MAX);
}

#[test]
fn renew_by_the_holder_extends_and_keeps_the_fence() {
    let state = held("a", 3, NOW + 10);
    let next = rules::renew(&state, &tok("a", 3), EXEC_LEASE_TTL, NOW).unwrap();
    assert_eq!(next, held("a", 3, NOW + TTL_MS));
}

#[test]
fn renew_mismatches() {
    let state = held("a", 3, NOW + 10);
    let live = Mismatch {
        holder: Some(tok("a", 3)),
    };
    for bad in [tok("b", 3), tok("a", 2), tok("a", 4)] {
        assert_eq!(
            rules::renew(&state, &bad, EXEC_LEASE_TTL, NOW),
            Err(live.clone()),
            "{bad}"
        );
    }
    let none = Mismatch { holder: None };
    let at_expiry = rules::renew(&state, &tok("a", 3), EXEC_LEASE_TTL, NOW + 10);
    assert_eq!(
        at_expiry,
        Err(none.clone()),
        "a lapsed claim cannot be renewed"
    );
    let after_release = rules::renew(&released(3), &tok("a", 3), EXEC_LEASE_TTL, NOW);
    assert_eq!(after_release, Err(none.clone()));
    let never = rules::renew(&LeaseState::default(), &tok("a", 0), EXEC_LEASE_TTL, NOW);
    assert_eq!(never, Err(none));
}

#[test]
fn release_by_the_owner_keeps_the_fence() {
    for state in [held("a", 3, NOW + 10), held("a", 3, NOW - 10)] {
        assert_eq!(rules::release(&state, &tok("a", 3), NOW), Ok(released(3)));
        assert_eq!(rules::release(&state, &tok("a", 9), NOW), Ok(released(3)));
    }
}

#[test]
fn release_refusals() {
    let state = held("a", 3, NOW + 10);
    let live = Mismatch {
        holder: Some(tok("a", 3)),
    };
    for bad in [
        tok("a", 2),
        tok("b", 3),
        tok("b", 4),
        tok("screen-view-bot", 0),
    ] {
        assert_eq!(
            rules::release(&state, &bad, NOW),
            Err(live.clone()),
            "{bad}"
        );
    }
}

#[test]
fn release_of_a_released_lease() {
    let none = Err(Mismatch { holder: None });
    assert_eq!(
        rules::release(&released(3), &tok("a", 3), NOW),
        Ok(released(3))
    );
    assert_eq!(rules::release(&released(3), &tok("a", 2), NOW), none);
    assert_eq!(rules::release(&released(3), &tok("a", 4), NOW), none);
    let default = LeaseState::default();
    assert_eq!(
        rules::release(&default, &tok("screen-view-bot", 0), NOW),
        none
    );
    assert_eq!(rules::release(&default, &tok("a", 1), NOW), none);
}

#[test]
fn viewer_tokens_never_release() {
    let viewer = tok("screen-view-bot", 0);
    for state in [
        LeaseState::default(),
        held("run", 1, NOW + 10),
        held("run", 1, NOW - 10),
        released(1),
        // Even a lease somehow held by the viewer's own name: grants start at fence 1.
        held("screen-view-bot", 1, NOW + 10),
    ] {
        assert!(rules::release(&state, &viewer, NOW).is_err(), "{state:?}");
    }
}

#[test]
fn holder_is_live_only_before_expiry() {
    let state = held("a", 2, NOW);
    assert_eq!(rules::holder(&state, NOW - 1), Some(tok("a", 2)));
    assert_eq!(rules::holder(&state, NOW), None);
    assert_eq!(rules::holder(&released(2), NOW - 1), None);
}
