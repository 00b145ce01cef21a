//! Product parsers the fuzz targets drive whose crates are too heavy to build with coverage
//! instrumentation here (guest-agent and control-plane pull in x11rb, quinn, sqlx, rustls...).
//! Their source files have no dependency beyond what this crate provides, so they are compiled
//! as they stand, by path: the fuzz targets exercise the product code itself, not a copy.
//! `scripts/test.sh` builds every target, so a change that breaks this is seen at once.
//!
//! The crates that are light enough (gateway-proto, homes without its S3 store) are ordinary
//! dependencies. Helpers shared by the targets are at the end.

/// The screen gateway's client→server RFB filter (guest-agent).
#[path = "../../guest-agent/src/gateway/rfb/filter.rs"]
pub mod rfb_filter;

/// The HTTP API's route table (control-plane). It names `crate::schema::code::ApiCode` and
/// `crate::tokens::Role`: the two stand-ins below carry the variants it uses.
#[path = "../../control-plane/src/route.rs"]
pub mod route;

/// The preview origin's host parsing (control-plane).
#[path = "../../control-plane/src/preview/host.rs"]
pub mod preview_host;

/// Stand-in for control-plane's `schema::code`: the codes the route table answers with.
pub mod schema {
    pub mod code {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ApiCode {
            BadRequest,
            MethodNotAllowed,
            NotFound,
            NoRoute,
        }
    }
}

/// Stand-in for control-plane's `tokens::Role`.
pub mod tokens {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Role {
        Viewer,
        Operator,
        Admin,
    }
}

/// Cuts `data` into pieces whose lengths follow a small generator seeded by `seed` (1 to 64
/// bytes each, and now and then an empty piece), so one input also tries a stream split at
/// arbitrary places, as sockets and websocket messages split it.
pub fn pieces(seed: u8, data: &[u8]) -> Vec<&[u8]> {
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761) | 1;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (state % 65) as usize;
        let (head, tail) = rest.split_at(n.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}
