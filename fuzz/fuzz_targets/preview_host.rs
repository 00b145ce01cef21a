//! The preview origin's host parsing (control-plane/src/preview/host.rs).
//!
//! Input: UTF-8 `host` or `host\ndomain` (the domain defaults to `preview.localhost`). Asserts:
//! it never panics; a label found is one DNS label (no `.`), and the host is exactly
//! `label.domain` (the domain in any case), then at most a trailing `.` and a `:port` of
//! digits: a host that merely contains the domain, or has it as a suffix of a longer name, is
//! never a preview.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rakazo_fuzz::preview_host::{label_of, well_formed, LABEL_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (host, domain) = s.split_once('\n').unwrap_or((s, "preview.localhost"));
    let Some(label) = label_of(host, domain) else {
        return;
    };
    assert!(!label.contains('.'), "label {label:?} spans labels");
    let named = format!("{label}.{domain}");
    let tail = host
        .get(..named.len())
        .filter(|head| head.eq_ignore_ascii_case(&named))
        .map(|_| &host[named.len()..]);
    let Some(tail) = tail else {
        panic!("{host:?} is not {named:?} and a port");
    };
    let tail = tail.strip_prefix('.').unwrap_or(tail);
    let port_ok = tail
        .strip_prefix(':')
        .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    assert!(
        tail.is_empty() || port_ok,
        "{host:?} has {tail:?} after its domain"
    );
    if well_formed(label) {
        assert_eq!(label.len(), LABEL_LEN);
    }
});
