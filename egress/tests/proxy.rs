//! The transparent proxy on loopback: connections "redirected" from TEST-NET destinations.

mod support;

use std::time::Duration;

use egress::{EventKind, Limits, Reason, Target};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::*;

const PAYLOAD: &[u8] = b"after the hello";

/// A TLS connection naming `sni` to `dst`: does it get through (the echo answers)?
async fn tls_gets_through(h: &Harness, from: &str, dst: &str, sni: &str) -> bool {
    let mut stream = h.connect(from, dst).await;
    let mut hello = client_hello(sni);
    hello.extend_from_slice(PAYLOAD);
    round_trip(&mut stream, &hello).await == hello
}

async fn resolve(h: &Harness, from: &str, name: &str) {
    assert_eq!(
        query(h, from, name, RecordType::A).await.0,
        ResponseCode::NoError
    );
}

#[tokio::test]
async fn an_allowed_sni_to_an_address_it_resolved_to_gets_through() {
    let mut h = Harness::default().await;
    let c1 = h.add("c-1", C1, "allow allowed.test:443");
    h.route("203.0.113.10:443", echo_server().await);
    resolve(&h, C1, "allowed.test.").await;
    assert!(tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    let counters = c1.counter_snapshot();
    assert_eq!(counters.connections_allowed, 1);
    // The byte counts land once the connection closes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events = h.events();
    let allowed = events
        .iter()
        .find(|e| e.kind == EventKind::Connection && e.allowed)
        .expect("an allowed event");
    assert_eq!(allowed.target, Target::Domain("allowed.test".into()));
    assert_eq!(allowed.port, 443);
    assert!(
        allowed.bytes_up > 0 && allowed.bytes_down > 0,
        "{allowed:?}"
    );
    assert!(c1.counter_snapshot().bytes_up >= allowed.bytes_up);
}

#[tokio::test]
async fn a_raw_connection_to_an_address_nobody_resolved_is_refused() {
    let mut h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test");
    h.route("203.0.113.10:443", echo_server().await);
    h.route("203.0.113.10:22", echo_server().await);
    // No DNS query first: the name is allowed, the address is not known to be its.
    assert!(!tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    let mut raw = h.connect(C1, "203.0.113.10:22").await;
    assert!(round_trip(&mut raw, b"SSH-2.0-raw\r\n").await.is_empty());
    let events = h.events();
    assert!(events.iter().all(|e| !e.allowed));
    assert!(
        events.iter().any(|e| e.reason == Reason::NotResolved),
        "{events:?}"
    );
    // Once the computer resolved it through the gateway, the same connections pass.
    resolve(&h, C1, "allowed.test.").await;
    assert!(tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    let mut raw = h.connect(C1, "203.0.113.10:22").await;
    assert_eq!(
        round_trip(&mut raw, b"SSH-2.0-raw\r\n").await,
        b"SSH-2.0-raw\r\n"
    );
}

#[tokio::test]
async fn a_denied_sni_is_refused_even_to_an_allowed_address() {
    let h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test 198.51.100.0/24");
    h.route("203.0.113.10:443", echo_server().await);
    h.route("198.51.100.7:443", echo_server().await);
    resolve(&h, C1, "allowed.test.").await;
    assert!(!tls_gets_through(&h, C1, "203.0.113.10:443", "denied.test").await);
    // An address the policy allows by CIDR does not make a denied name allowed.
    assert!(!tls_gets_through(&h, C1, "198.51.100.7:443", "denied.test").await);
    // But reaches it by address with an allowed or absent name.
    assert!(tls_gets_through(&h, C1, "198.51.100.7:443", "allowed.test").await);
    // An allowed name to an address another name resolved to is refused.
    h.add("c-1", C1, "allow allowed.test other.test");
    resolve(&h, C1, "other.test.").await;
    assert!(!tls_gets_through(&h, C1, "198.51.100.7:443", "allowed.test").await);
}

#[tokio::test]
async fn internal_destinations_are_refused_even_under_open() {
    let mut h = Harness::default().await;
    h.add("c-1", C1, "open");
    let echo = echo_server().await;
    // Routed, so that a gateway that let them through would reach the echo server.
    let internal = [
        echo.to_string(),
        "169.254.169.254:80".to_string(),
        "10.0.0.1:5432".to_string(),
        "192.168.1.1:80".to_string(),
        "172.16.0.1:2375".to_string(),
        "100.64.0.1:80".to_string(),
        "[::1]:80".to_string(),
        format!("[::ffff:127.0.0.1]:{}", echo.port()),
        "[::ffff:169.254.169.254]:80".to_string(),
        "[fd00::1]:80".to_string(),
        "[fe80::1]:80".to_string(),
    ];
    for dst in &internal {
        h.route(dst, echo);
        assert!(
            !tls_gets_through(&h, C1, dst, "allowed.test").await,
            "{dst}"
        );
        let mut raw = h.connect(C1, dst).await;
        assert!(
            round_trip(&mut raw, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .is_empty(),
            "{dst}"
        );
    }
    let events = h.events();
    assert!(
        !events.is_empty()
            && events
                .iter()
                .all(|e| e.reason == Reason::Internal && !e.allowed)
    );
    // A public address is reachable under open with no DNS at all: the routes work.
    h.route("203.0.113.10:443", echo);
    assert!(tls_gets_through(&h, C1, "203.0.113.10:443", "anything.test").await);
}

#[tokio::test]
async fn http_host_decides_and_a_refusal_says_why() {
    let h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test");
    h.route("203.0.113.10:80", echo_server().await);
    resolve(&h, C1, "allowed.test.").await;
    let ok = b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
    let mut stream = h.connect(C1, "203.0.113.10:80").await;
    assert_eq!(round_trip(&mut stream, ok).await, ok);
    let mut stream = h.connect(C1, "203.0.113.10:80").await;
    stream_write(&mut stream, b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n").await;
    let reply = String::from_utf8(read_to_close(&mut stream).await).unwrap();
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(reply.contains("not in the allow list"), "{reply}");
    // Two names in one request: refused.
    let mut stream = h.connect(C1, "203.0.113.10:80").await;
    stream_write(
        &mut stream,
        b"GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    )
    .await;
    assert!(String::from_utf8(read_to_close(&mut stream).await)
        .unwrap()
        .starts_with("HTTP/1.1 403"));
}

async fn stream_write(stream: &mut tokio::net::TcpStream, data: &[u8]) {
    use tokio::io::AsyncWriteExt;
    stream.write_all(data).await.unwrap();
}

#[tokio::test]
async fn a_silent_client_is_decided_by_address_after_the_peek_deadline() {
    let h = Harness::default().await; // peek_timeout 300 ms
    h.add("c-1", C1, "allow 203.0.113.0/24:25");
    h.route("203.0.113.10:25", echo_server().await);
    h.route("203.0.113.10:26", echo_server().await);
    let mut ok = h.connect(C1, "203.0.113.10:25").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(round_trip(&mut ok, b"late").await, b"late");
    let mut refused = h.connect(C1, "203.0.113.10:26").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(round_trip(&mut refused, b"late").await.is_empty());
}

#[tokio::test]
async fn the_connection_limit_refuses_and_frees() {
    let mut h = Harness::default().await;
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let c1 = h.add_with("c-1", C1, "open", limits);
    h.route("203.0.113.10:443", echo_server().await);
    let mut first = h.connect(C1, "203.0.113.10:443").await;
    let hello = client_hello("a.test");
    assert_eq!(round_trip(&mut first, &hello).await, hello);
    assert!(!tls_gets_through(&h, C1, "203.0.113.10:443", "a.test").await);
    assert_eq!(c1.counter_snapshot().connections_limited, 1);
    assert!(h
        .events()
        .iter()
        .any(|e| e.reason == Reason::TooManyConnections));
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tls_gets_through(&h, C1, "203.0.113.10:443", "a.test").await);
}

#[tokio::test]
async fn bandwidth_is_limited_per_computer() {
    let h = Harness::default().await;
    let limits = Limits {
        up_bytes_per_sec: 64 * 1024,
        ..Limits::default()
    };
    h.add_with("c-1", C1, "open", limits);
    h.route("203.0.113.10:443", echo_server().await);
    let mut stream = h.connect(C1, "203.0.113.10:443").await;
    let mut data = client_hello("a.test");
    data.resize(192 * 1024, 7);
    let start = egress::clock::now();
    let echoed = round_trip(&mut stream, &data).await;
    let took = start.elapsed();
    assert_eq!(echoed.len(), data.len());
    // 64 KiB of burst, then 128 KiB at 64 KiB/s.
    assert!(took >= Duration::from_millis(1700), "took {took:?}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
}

#[tokio::test]
async fn a_policy_change_applies_to_the_next_connection() {
    let h = Harness::default().await;
    let c1 = h.add("c-1", C1, "open");
    h.route("203.0.113.10:443", echo_server().await);
    assert!(tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    c1.set_policy("none".parse().unwrap());
    assert!(!tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    c1.set_policy("open deny allowed.test".parse().unwrap());
    assert!(!tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    assert!(tls_gets_through(&h, C1, "203.0.113.10:443", "other.test").await);
}

#[tokio::test]
async fn records_of_one_computer_do_not_open_another() {
    let h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test");
    h.add("c-2", C2, "allow allowed.test");
    h.route("203.0.113.10:443", echo_server().await);
    resolve(&h, C2, "allowed.test.").await;
    assert!(!tls_gets_through(&h, C1, "203.0.113.10:443", "allowed.test").await);
    assert!(tls_gets_through(&h, C2, "203.0.113.10:443", "allowed.test").await);
    // And an unregistered source gets nothing.
    assert!(!tls_gets_through(&h, "127.0.0.9", "203.0.113.10:443", "allowed.test").await);
}
