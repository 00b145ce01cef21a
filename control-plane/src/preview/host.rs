//! A preview's host: the label a request's `Host` names under the preview domain. Pure
//! functions of strings with no dependency, so the fuzz target `preview_host` (fuzz/) compiles
//! this file as it stands.

/// Length of a preview's host label: 128 random bits in hex.
pub const LABEL_LEN: usize = 32;

/// The label of a request's `Host` when it names a preview origin under `domain`: `None` for
/// any other host (the API's own).
pub fn label_of<'a>(host: &'a str, domain: &str) -> Option<&'a str> {
    // Without the port; a preview host is never an IPv6 literal.
    let name = host.rsplit_once(':').map_or(host, |(n, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            n
        } else {
            host
        }
    });
    let name = name.strip_suffix('.').unwrap_or(name);
    let (label, rest) = name.split_once('.')?;
    rest.eq_ignore_ascii_case(domain).then_some(label)
}

/// Whether a label is one this server could have made (so nothing else is looked up).
pub fn well_formed(label: &str) -> bool {
    label.len() == LABEL_LEN && label.bytes().all(|b| b.is_ascii_hexdigit())
}
