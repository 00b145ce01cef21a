use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn policy(s: &str) -> Policy {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

const INTERNAL: &[&str] = &[
    "0.0.0.0",
    "0.1.2.3",
    "10.0.0.1",
    "100.64.0.1",
    "100.127.255.254",
    "127.0.0.1",
    "127.5.5.5",
    "169.254.169.254",
    "169.254.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.1.2.3",
    "::ffff:192.168.0.1",
    "64:ff9b::a9fe:a9fe", // NAT64 of 169.254.169.254
    "2002:7f00:1::",      // 6to4 of 127.0.0.1
];

const EXTERNAL: &[&str] = &[
    "192.0.2.1",
    "198.51.100.7",
    "203.0.113.10",
    "8.8.8.8",
    "100.63.255.255",
    "100.128.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "2001:db8::1",
    "2606:4700::1111",
    "::ffff:203.0.113.10",
];

#[test]
fn internal_ranges_are_denied_under_every_policy() {
    let everything = policy("allow 0.0.0.0/0 ::/0 127.0.0.1:80 169.254.169.254");
    for p in [Policy::open(), Policy::none(), everything] {
        for addr in INTERNAL {
            assert!(is_internal(ip(addr)), "{addr}");
            assert_eq!(
                p.decide_addr(ip(addr), 80),
                Decision::Deny(Reason::Internal),
                "{p} {addr}"
            );
            // By literal name too.
            assert_eq!(
                p.decide_name(addr, 80),
                Decision::Deny(Reason::Internal),
                "{p} {addr}"
            );
        }
    }
}

#[test]
fn documentation_ranges_are_external_and_open_allows_them() {
    for addr in EXTERNAL {
        assert!(!is_internal(ip(addr)), "{addr}");
        assert_eq!(
            Policy::open().decide_addr(ip(addr), 443),
            Decision::Allow,
            "{addr}"
        );
        assert_eq!(
            Policy::none().decide_addr(ip(addr), 443),
            Decision::Deny(Reason::PolicyNone)
        );
    }
    assert_eq!(
        Policy::open().decide_name("anything.example", 1),
        Decision::Allow
    );
    assert_eq!(
        Policy::none().decide_name("github.com", 443),
        Decision::Deny(Reason::PolicyNone)
    );
}

#[test]
fn allow_list_names_wildcards_and_ports() {
    let p = policy("allow github.com *.pythonhosted.org:443 api.test:80,8000-8100");
    assert!(p.decide_name("github.com", 22).is_allowed());
    assert!(p.decide_name("GitHub.COM.", 443).is_allowed());
    assert_eq!(
        p.decide_name("gist.github.com", 443),
        Decision::Deny(Reason::NotAllowed)
    );
    assert_eq!(
        p.decide_name("evilgithub.com", 443),
        Decision::Deny(Reason::NotAllowed)
    );
    assert!(p.decide_name("files.pythonhosted.org", 443).is_allowed());
    assert!(p.decide_name("a.b.pythonhosted.org", 443).is_allowed());
    assert_eq!(
        p.decide_name("pythonhosted.org", 443),
        Decision::Deny(Reason::NotAllowed)
    );
    assert_eq!(
        p.decide_name("xpythonhosted.org", 443),
        Decision::Deny(Reason::NotAllowed)
    );
    assert_eq!(
        p.decide_name("files.pythonhosted.org", 80),
        Decision::Deny(Reason::NotAllowed)
    );
    assert!(p.decide_name("api.test", 8050).is_allowed());
    assert!(!p.decide_name("api.test", 8101).is_allowed());
    // DNS resolves a name allowed on some port.
    assert!(p
        .decide_name_any_port("files.pythonhosted.org")
        .is_allowed());
    assert!(!p.decide_name_any_port("pythonhosted.org").is_allowed());
    // Domain rules never allow an address by themselves.
    assert_eq!(
        p.decide_addr(ip("203.0.113.10"), 443),
        Decision::Deny(Reason::NotAllowed)
    );
    assert_eq!(
        p.decide_name("bad name!", 443),
        Decision::Deny(Reason::InvalidName)
    );
    assert_eq!(
        p.decide_name(&"a".repeat(300), 443),
        Decision::Deny(Reason::InvalidName)
    );
}

#[test]
fn allow_list_cidrs_and_ports() {
    let p = policy("allow 203.0.113.0/24:22 [2001:db8::/32]:443 198.51.100.7");
    assert!(p.decide_addr(ip("203.0.113.99"), 22).is_allowed());
    assert!(!p.decide_addr(ip("203.0.113.99"), 23).is_allowed());
    assert!(p.decide_addr(ip("::ffff:203.0.113.99"), 22).is_allowed());
    assert!(p.decide_addr(ip("2001:db8::5"), 443).is_allowed());
    assert!(p.decide_addr(ip("198.51.100.7"), 9).is_allowed());
    assert!(!p.decide_addr(ip("198.51.100.8"), 9).is_allowed());
    assert!(
        p.decide_name("203.0.113.5", 22).is_allowed(),
        "an IP literal is an address"
    );
}

#[test]
fn the_deny_list_wins() {
    let p = policy(
        "allow *.github.com 203.0.113.0/24 deny evil.github.com 203.0.113.66 *.raw.github.com:443",
    );
    assert!(p.decide_name("api.github.com", 443).is_allowed());
    assert_eq!(
        p.decide_name("evil.github.com", 443),
        Decision::Deny(Reason::DenyListed)
    );
    assert_eq!(
        p.decide_name_any_port("evil.github.com"),
        Decision::Deny(Reason::DenyListed)
    );
    assert_eq!(
        p.decide_name("x.raw.github.com", 443),
        Decision::Deny(Reason::DenyListed)
    );
    assert!(p.decide_name("x.raw.github.com", 80).is_allowed());
    assert!(p.decide_name_any_port("x.raw.github.com").is_allowed());
    assert_eq!(
        p.decide_addr(ip("203.0.113.66"), 1),
        Decision::Deny(Reason::DenyListed)
    );
    let open = policy("open deny denied.test 198.51.100.0/24");
    assert_eq!(
        open.decide_name("denied.test", 80),
        Decision::Deny(Reason::DenyListed)
    );
    assert!(open.decide_name("allowed.test", 80).is_allowed());
    assert_eq!(
        open.decide_addr(ip("198.51.100.1"), 80),
        Decision::Deny(Reason::DenyListed)
    );
}

#[test]
fn word_form_and_json_round_trip() {
    for s in [
        "open",
        "none",
        "allow github.com *.pythonhosted.org:443 203.0.113.0/24:22,80-90 [2001:db8::/32]:443",
        "open deny denied.test 198.51.100.0/24",
        "allow 2001:db8::/48 deny x.test",
    ] {
        let p = policy(s);
        assert_eq!(p.to_string().parse::<Policy>().unwrap(), p, "{s}");
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), p, "{json}");
        assert_eq!(json.parse::<Policy>().unwrap(), p);
    }
    let p: Policy = serde_json::from_str(
        r#"{"mode":"allow","allow":["github.com:443"],"deny":["x.github.com"]}"#,
    )
    .unwrap();
    assert!(p.decide_name("github.com", 443).is_allowed());
    assert_eq!(
        serde_json::to_string(&Policy::open()).unwrap(),
        r#"{"mode":"open"}"#
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let err = |s: &str| s.parse::<Policy>().unwrap_err().to_string();
    assert!(err("everything").contains("starts with `open`, `none` or `allow`"));
    assert!(err("").contains("starts with"));
    assert!(err("open github.com").contains("use `allow`"));
    assert!(err("allow git*hub.com").contains("wildcard"));
    assert!(err("allow *.com").contains("two labels"));
    assert!(err("allow github.com --json").contains("starts or ends with `-`"));
    assert!(err("allow a-.example.com").contains("starts or ends with `-`"));
    assert!(err("allow github.com:0").contains("not a port"));
    assert!(err("allow github.com:99999").contains("not a port"));
    assert!(err("allow github.com:90-80").contains("empty"));
    assert!(err("allow 10.0.0.0/33").contains("not an IP address or CIDR"));
    assert!(err(&format!("allow {}.com", "a.".repeat(130))).contains("not a domain name"));
    assert!(err(&format!("allow {}", "a".repeat(600))).contains("too long"));
    assert!(err(&format!("allow {}", ["a.b"; 257].join(" "))).contains("too many rules"));
    let long_label = format!("allow {}.com", "a".repeat(64));
    assert!(err(&long_label).contains("not a domain name"));
    let json = r#"{"mode":"allow","allow":["ok.test"],"extra":1}"#;
    assert!(
        json.parse::<Policy>().is_err(),
        "unknown fields are refused"
    );
    let many: Vec<String> = (0..300).map(|i| format!("h{i}.test")).collect();
    let json = serde_json::json!({"mode": "allow", "allow": many}).to_string();
    assert!(json
        .parse::<Policy>()
        .unwrap_err()
        .to_string()
        .contains("too many rules"));
}
