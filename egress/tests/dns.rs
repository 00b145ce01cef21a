//! The DNS server on loopback: what it answers, what it refuses, what it never sends upstream.

mod support;

use std::time::Duration;

use egress::{EventKind, Limits, Reason, Target};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::*;

#[tokio::test]
async fn allowed_names_resolve_and_are_recorded_for_that_computer_only() {
    let h = Harness::default().await;
    let c1 = h.add("c-1", C1, "allow allowed.test");
    let c2 = h.add("c-2", C2, "allow allowed.test");
    let (code, ips) = query(&h, C1, "allowed.test.", RecordType::A).await;
    assert_eq!((code, ips), (ResponseCode::NoError, vec![ip(ALLOWED_IP)]));
    let now = egress::clock::now();
    assert_eq!(
        c1.names_for(ip(ALLOWED_IP), now),
        vec!["allowed.test".to_string()]
    );
    assert!(
        c2.names_for(ip(ALLOWED_IP), now).is_empty(),
        "records are per computer"
    );
    // Case does not matter, and TCP answers the same.
    let (code, ips) = query_tcp(&h, C1, "ALLOWED.test.", RecordType::A).await;
    assert_eq!((code, ips), (ResponseCode::NoError, vec![ip(ALLOWED_IP)]));
    // No IPv6 address: an empty answer.
    assert_eq!(
        query(&h, C1, "allowed.test.", RecordType::AAAA).await,
        (ResponseCode::NoError, vec![])
    );
    assert_eq!(c1.counter_snapshot().dns_answered, 3);
}

#[tokio::test]
async fn denied_names_get_refused_and_never_go_upstream() {
    let mut h = Harness::default().await;
    let c1 = h.add("c-1", C1, "allow allowed.test");
    for (name, rtype) in [
        ("denied.test.", RecordType::A),
        ("denied.test.", RecordType::AAAA),
        // DNS tunnelling: data in labels under a denied domain, TXT for the reply.
        (
            "bWFkZSB0byBsZWFr.c2VjcmV0.exfil.denied.test.",
            RecordType::TXT,
        ),
        (&format!("{}.denied.test.", "a".repeat(63)), RecordType::TXT),
        ("x.allowed.test.", RecordType::A), // not a wildcard
    ] {
        let (code, ips) = query(&h, C1, name, rtype).await;
        assert_eq!(code, ResponseCode::Refused, "{name}");
        assert!(ips.is_empty());
    }
    assert!(h.asked().is_empty(), "asked upstream: {:?}", h.asked());
    assert_eq!(c1.counter_snapshot().dns_refused, 5);
    let events = h.events();
    let denied = events
        .iter()
        .find(|e| e.target == Target::Domain("denied.test".into()))
        .expect("a denied event");
    assert!(!denied.allowed);
    assert_eq!(
        (denied.kind, denied.port, denied.reason),
        (EventKind::Dns, 53, Reason::NotAllowed)
    );
    assert_eq!(denied.count, 2, "A and AAAA merged in one event");
}

#[tokio::test]
async fn other_types_for_allowed_names_are_empty_and_not_forwarded() {
    let h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test");
    for rtype in [RecordType::TXT, RecordType::MX, RecordType::HTTPS] {
        assert_eq!(
            query(&h, C1, "allowed.test.", rtype).await,
            (ResponseCode::NoError, vec![])
        );
    }
    assert!(h.asked().is_empty());
}

#[tokio::test]
async fn open_resolves_anything_but_drops_internal_answers() {
    let h = Harness::default().await;
    let c1 = h.add("c-1", C1, "open deny denied.test");
    assert_eq!(
        query(&h, C1, "other.test.", RecordType::A).await,
        (ResponseCode::NoError, vec![ip(OTHER_IP)])
    );
    // rebind.test resolves to 10.0.0.5 and 198.51.100.7: only the public one is answered.
    assert_eq!(
        query(&h, C1, "rebind.test.", RecordType::A).await,
        (ResponseCode::NoError, vec![ip(OTHER_IP)])
    );
    assert!(c1
        .names_for(ip("10.0.0.5"), egress::clock::now())
        .is_empty());
    assert_eq!(
        query(&h, C1, "denied.test.", RecordType::A).await.0,
        ResponseCode::Refused
    );
    assert_eq!(
        query(&h, C1, "nowhere.test.", RecordType::A).await.0,
        ResponseCode::NXDomain
    );
    assert!(!h.asked().contains(&"denied.test".to_string()));
}

#[tokio::test]
async fn unknown_sources_are_refused() {
    let h = Harness::default().await;
    h.add("c-1", C1, "open");
    assert_eq!(
        query(&h, "127.0.0.9", "allowed.test.", RecordType::A)
            .await
            .0,
        ResponseCode::Refused
    );
    assert_eq!(h.gateway.unknown_peers(), 1);
    assert!(h.asked().is_empty());
}

#[tokio::test]
async fn a_policy_change_applies_to_the_next_query() {
    let h = Harness::default().await;
    let c1 = h.add("c-1", C1, "none");
    assert_eq!(
        query(&h, C1, "allowed.test.", RecordType::A).await.0,
        ResponseCode::Refused
    );
    c1.set_policy("allow allowed.test".parse().unwrap());
    assert_eq!(
        query(&h, C1, "allowed.test.", RecordType::A).await.0,
        ResponseCode::NoError
    );
    h.registry
        .set_policy(&egress::ComputerId::new("c-1"), egress::Policy::none());
    assert_eq!(
        query(&h, C1, "allowed.test.", RecordType::A).await.0,
        ResponseCode::Refused
    );
}

#[tokio::test]
async fn queries_over_the_rate_are_refused_and_counted() {
    let mut h = Harness::default().await;
    let limits = Limits {
        dns_queries_per_sec: 5,
        dns_burst: 5,
        ..Limits::default()
    };
    let c1 = h.add_with("c-1", C1, "allow allowed.test", limits);
    h.add("c-2", C2, "allow allowed.test");
    let mut refused = 0;
    for _ in 0..20 {
        if query(&h, C1, "allowed.test.", RecordType::A).await.0 == ResponseCode::Refused {
            refused += 1;
        }
    }
    assert!(refused >= 13, "only {refused} of 20 refused");
    let counters = c1.counter_snapshot();
    assert_eq!(counters.dns_rate_limited, refused);
    // Another computer is not limited by c-1's bucket.
    assert_eq!(
        query(&h, C2, "allowed.test.", RecordType::A).await.0,
        ResponseCode::NoError
    );
    // The bucket refills.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        query(&h, C1, "allowed.test.", RecordType::A).await.0,
        ResponseCode::NoError
    );
    let events = h.events();
    assert!(events
        .iter()
        .any(|e| e.reason == Reason::RateLimited && e.count == refused));
}

#[tokio::test]
async fn malformed_messages_get_formerr_or_nothing() {
    let h = Harness::default().await;
    h.add("c-1", C1, "open");
    let reply = h
        .gateway
        .answer_dns(ip(C1), &[0xab, 0xcd, 0xff], 512)
        .await
        .unwrap();
    let msg = hickory_proto::op::Message::from_vec(&reply).unwrap();
    assert_eq!(
        (msg.metadata.id, msg.metadata.response_code),
        (0xabcd, ResponseCode::FormErr)
    );
    assert!(h.gateway.answer_dns(ip(C1), &[1], 512).await.is_none());
}

#[tokio::test]
async fn the_hickory_resolver_reads_answers_from_an_upstream_on_loopback() {
    // Gateway A (static answers) is the upstream of a hickory resolver: its own computer is
    // 127.0.0.1, where the resolver's queries come from.
    let a = Harness::default().await;
    a.add("upstream", "127.0.0.1", "open deny denied.test");
    let resolver = egress::SystemResolver::with_name_servers(&[a.dns_udp]).unwrap();
    use egress::{Family, Resolve, ResolveError, Resolved};
    let v4 = resolver.resolve("allowed.test", Family::V4).await.unwrap();
    assert_eq!(
        v4,
        vec![Resolved {
            ip: ip(ALLOWED_IP),
            ttl: 30
        }]
    );
    assert_eq!(
        resolver.resolve("allowed.test", Family::V6).await,
        Ok(vec![])
    );
    assert_eq!(
        resolver.resolve("nowhere.test", Family::V4).await,
        Err(ResolveError::NxDomain)
    );
    assert!(matches!(
        resolver.resolve("denied.test", Family::V4).await,
        Err(ResolveError::Failed(_))
    ));
}
