//! The HTTP API's route table (control-plane/src/route.rs): every request's method and path
//! are parsed by [`Route::parse`] before any handler or authentication runs.
//!
//! Input: one byte picking the method, then the path (UTF-8). Asserts, for any input:
//! - it never panics;
//! - a route it answers takes the request's method, and its path ([`Route::path`], values
//!   percent-encoded) parses back to the same endpoint; to the very same route when every
//!   value is plain (nothing to encode);
//! - a refusal says why, and only an attachment link's may be answered without the token.
#![no_main]

use hyper::Method;
use libfuzzer_sys::fuzz_target;
use rakazo_fuzz::route::{Route, Verb};

const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "PROPFIND",
];

fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'*'))
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, path)) = data.split_first() else {
        return;
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let method = Method::from_bytes(METHODS[usize::from(m) % METHODS.len()].as_bytes())
        .expect("a valid method");
    match Route::parse(&method, path) {
        Ok(route) => {
            let endpoint = route.endpoint();
            assert!(
                endpoint.verb() == Verb::Any || endpoint.verb().method() == method,
                "{endpoint:?} answered {method}"
            );
            assert!(!endpoint.name().is_empty());
            let _ = route.computer();
            let again = Route::parse(&route.method(), &route.path());
            assert_eq!(
                again.as_ref().map(Route::endpoint),
                Ok(endpoint),
                "{path:?} is {route:?}, whose path {:?} is not",
                route.path()
            );
            if route.params().iter().all(|(_, v)| plain(v)) {
                assert_eq!(again.as_ref(), Ok(&route));
            }
        }
        Err(e) => {
            assert!(!e.message.is_empty());
            assert!(!e.public || path.starts_with("/att/"), "{path:?}: {e:?}");
        }
    }
});
