//! Unit tests of the tunnel: lease slots, deadlines, error wording.

use super::*;
use gateway_proto::desktop::{ActRequest, Action};

fn bot(s: &str) -> BotId {
    BotId::new(s).unwrap()
}

fn tok(s: &str) -> LeaseToken {
    LeaseToken::parse(s).unwrap()
}

#[test]
fn a_lease_push_is_kept_until_sent_and_never_lowered() {
    let mut slots = LeaseSlots::default();
    assert!(slots.push(&bot("b"), &tok("run-2:2"), false));
    // An older grant read late (the hello's database read racing an acquire) changes nothing.
    assert!(!slots.push(&bot("b"), &tok("run-1:1"), false));
    assert_eq!(
        slots.take_unsent(),
        vec![ControlMsg::Lease {
            bot: bot("b"),
            lease: Some(tok("run-2:2"))
        }]
    );
    assert!(slots.take_unsent().is_empty(), "sent once");
    // A release of the current lease is sent after its grant.
    assert!(slots.push(&bot("b"), &tok("run-2:2"), true));
    assert!(
        !slots.push(&bot("b"), &tok("run-2:2"), false),
        "a release stands"
    );
    assert_eq!(
        slots.take_unsent(),
        vec![
            ControlMsg::Lease {
                bot: bot("b"),
                lease: Some(tok("run-2:2"))
            },
            ControlMsg::Lease {
                bot: bot("b"),
                lease: None
            },
        ]
    );
    // Many pushes while the loop is busy: only the latest is sent, none is dropped.
    for fence in 3..300u64 {
        slots.push(&bot("b"), &LeaseToken::new("run-x", fence).unwrap(), false);
    }
    slots.push(&bot("c"), &tok("run-9:1"), false);
    let mut sent = slots.take_unsent();
    sent.sort_by_key(|m| format!("{m:?}"));
    assert_eq!(sent.len(), 2);
    assert!(sent.contains(&ControlMsg::Lease {
        bot: bot("b"),
        lease: Some(LeaseToken::new("run-x", 299).unwrap())
    }));
}

#[test]
fn deadlines_follow_the_request() {
    let base = Duration::from_secs(7);
    assert_eq!(
        Deadlines::for_request(&Request::Ping, base),
        Deadlines::all(base)
    );
    let quiet = Deadlines::for_exec(None, base);
    assert_eq!(
        (quiet.reply, quiet.out),
        (None, None),
        "exec keeps its own semantics"
    );
    let bounded = Deadlines::for_exec(Some(60_000), base);
    assert_eq!(bounded.reply, Some(Duration::from_secs(67)));
    assert_eq!(bounded.out, None, "stdin waits for the command to read it");
    let act = Request::Act(ActRequest {
        bot: bot("b"),
        lease: tok("r:1"),
        actions: vec![Action::Wait { ms: 5000 }, Action::Wait { ms: 2000 }],
        observe: true,
        settle_ms: Some(1000),
        frame: None,
        observe_options: Default::default(),
    });
    assert_eq!(
        Deadlines::for_request(&act, base),
        Deadlines::all(Duration::from_secs(15))
    );
}

#[test]
fn a_timeout_names_the_computer_and_the_deadline() {
    let e = TunnelError::Timeout {
        computer: "c-1".into(),
        waited: Duration::from_secs(4),
    };
    assert_eq!(
        e.to_string(),
        "the guest of computer c-1 did not answer within 4 s"
    );
    assert!(e.is_uncertain());
}
