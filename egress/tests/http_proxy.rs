//! The explicit HTTP proxy on loopback: CONNECT tunnels and absolute-form requests.

mod support;

use egress::{EventKind, Limits, Reason, Target};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends a request head and reads the response head (up to the blank line).
async fn request(stream: &mut TcpStream, head: &str) -> String {
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(WAIT, stream.read(&mut byte)).await {
            Ok(Ok(1)) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).to_string()
}

#[tokio::test]
async fn connect_to_an_allowed_name_tunnels() {
    let mut h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test:443");
    h.route("203.0.113.10:443", echo_server().await);
    let mut stream = h.connect_proxy(C1).await;
    let head = request(
        &mut stream,
        "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let hello = client_hello("allowed.test");
    assert_eq!(round_trip(&mut stream, &hello).await, hello);
    drop(stream);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let events = h.events();
    let e = events.iter().find(|e| e.allowed).expect("an allowed event");
    assert_eq!((e.kind, e.port), (EventKind::HttpProxy, 443));
    assert_eq!(e.target, Target::Domain("allowed.test".into()));
    assert_eq!(e.bytes_up, hello.len() as u64);
}

#[tokio::test]
async fn connect_refusals_say_why() {
    let mut h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test:443 rebind.test");
    let echo = echo_server().await;
    h.route("203.0.113.10:22", echo);
    h.route(&echo.to_string(), echo);
    h.route("10.0.0.5:443", echo);
    for (target, status, reason) in [
        ("denied.test:443", "403", "not in the allow list"),
        ("allowed.test:22", "403", "not in the allow list"),
        (&echo.to_string(), "403", "internal address"),
        ("169.254.169.254:80", "403", "internal address"),
        ("203.0.113.10:443", "403", "address not resolved"),
        // rebind.test resolves to 10.0.0.5 (dropped) and 198.51.100.7 (no route here).
        ("rebind.test:443", "502", "destination unreachable"),
        ("nowhere.test:443", "403", "not in the allow list"),
    ] {
        let mut stream = h.connect_proxy(C1).await;
        let head = request(
            &mut stream,
            &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
        )
        .await;
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{target}: {head}"
        );
        let mut body = vec![0u8; 200];
        let n = tokio::time::timeout(WAIT, stream.read(&mut body))
            .await
            .unwrap()
            .unwrap();
        let body = String::from_utf8_lossy(&body[..n]).to_string();
        assert!(body.contains(reason), "{target}: {body}");
    }
    assert!(h.events().iter().all(|e| !e.allowed));
    assert!(!h.asked().contains(&"denied.test".to_string()));
}

#[tokio::test]
async fn absolute_form_requests_are_forwarded_with_their_host() {
    let h = Harness::default().await;
    h.add("c-1", C1, "allow allowed.test:80");
    h.route("203.0.113.10:80", http_server().await);
    let mut stream = h.connect_proxy(C1).await;
    let head = request(
        &mut stream,
        "GET http://allowed.test/path?q=1 HTTP/1.1\r\nHost: allowed.test\r\nProxy-Connection: keep-alive\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = vec![0u8; 200];
    let n = tokio::time::timeout(WAIT, stream.read(&mut body))
        .await
        .unwrap()
        .unwrap();
    let body = String::from_utf8_lossy(&body[..n]).to_string();
    assert!(body.contains("host=allowed.test"), "{body}");
    assert!(body.contains("line=GET /path?q=1 HTTP/1.1"), "{body}");
    let mut stream = h.connect_proxy(C1).await;
    let head = request(
        &mut stream,
        "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
}

#[tokio::test]
async fn the_proxy_shares_the_connection_limit_and_knows_only_computers() {
    let mut h = Harness::default().await;
    let c1 = h.add_with(
        "c-1",
        C1,
        "open",
        Limits {
            max_connections: 1,
            ..Limits::default()
        },
    );
    h.route("203.0.113.10:443", echo_server().await);
    let mut first = h.connect_proxy(C1).await;
    let head = request(&mut first, "CONNECT 203.0.113.10:443 HTTP/1.1\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut second = h.connect_proxy(C1).await;
    let head = request(&mut second, "CONNECT 203.0.113.10:443 HTTP/1.1\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert_eq!(c1.counter_snapshot().connections_limited, 1);
    assert!(h
        .events()
        .iter()
        .any(|e| e.reason == Reason::TooManyConnections));
    // A source that is no computer is dropped without an answer.
    let mut stranger = h.connect_proxy("127.0.0.9").await;
    let head = request(&mut stranger, "CONNECT 203.0.113.10:443 HTTP/1.1\r\n\r\n").await;
    assert!(head.is_empty(), "{head}");
}
