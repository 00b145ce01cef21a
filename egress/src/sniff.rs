//! What a connection's first bytes say about where it is going: the TLS ClientHello's SNI
//! (parsed by rustls's server [`Acceptor`]) or the HTTP request's Host (parsed by `httparse`).
//!
//! This module owns that reading only; it decides nothing.

use rustls::server::Acceptor;

/// The most bytes read before deciding without a name.
pub const MAX_PEEK: usize = 16 * 1024;

/// The protocol the first bytes look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tls,
    Http,
    Other,
}

/// What the first bytes say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// A complete ClientHello or request head, with its name if it carries one.
    Done { proto: Proto, name: Option<String> },
    /// An HTTP request naming two different hosts (several Host headers, or an absolute URI
    /// whose host is not the Host header's): refused, the server might use either.
    Conflict,
}

/// Reads `buf`, the connection's first bytes so far.
pub fn sniff(buf: &[u8]) -> Sniffed {
    match buf.first() {
        None => Sniffed::NeedMore,
        Some(0x16) => sniff_tls(buf),
        Some(b) if b.is_ascii_uppercase() => sniff_http(buf),
        Some(_) => Sniffed::Done {
            proto: Proto::Other,
            name: None,
        },
    }
}

fn sniff_tls(buf: &[u8]) -> Sniffed {
    let mut acceptor = Acceptor::default();
    let mut rest = buf;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => {
            let name = accepted
                .client_hello()
                .server_name()
                .map(str::to_ascii_lowercase);
            Sniffed::Done {
                proto: Proto::Tls,
                name,
            }
        }
        Ok(None) if buf.len() < MAX_PEEK => Sniffed::NeedMore,
        Ok(None) | Err(_) => Sniffed::Done {
            proto: Proto::Tls,
            name: None,
        },
    }
}

fn sniff_http(buf: &[u8]) -> Sniffed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() < MAX_PEEK => Sniffed::NeedMore,
        Ok(httparse::Status::Partial) | Err(_) => Sniffed::Done {
            proto: Proto::Other,
            name: None,
        },
        Ok(httparse::Status::Complete(_)) => {
            let mut hosts = request
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("host"))
                .map(|h| std::str::from_utf8(h.value).ok().map(host_of));
            let host = match (hosts.next(), hosts.next()) {
                (Some(Some(host)), None) => Some(host),
                (None, None) => None,
                _ => return Sniffed::Conflict,
            };
            let uri_host = request.path.and_then(|p| {
                let rest = p
                    .strip_prefix("http://")
                    .or_else(|| p.strip_prefix("https://"))?;
                Some(host_of(rest.split(['/', '?']).next().unwrap_or("")))
            });
            match (host, uri_host) {
                (Some(h), Some(u)) if h != u => Sniffed::Conflict,
                (h, u) => Sniffed::Done {
                    proto: Proto::Http,
                    name: h.or(u),
                },
            }
        }
    }
}

/// The host of `host[:port]` or `[v6]:port`, lowercased, userinfo dropped.
pub fn host_of(authority: &str) -> String {
    let authority = authority.trim();
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match authority.rsplit_once(':') {
            Some((host, port))
                if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                host
            }
            _ => authority,
        }
    };
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_hello(name: &str) -> Vec<u8> {
        let roots = rustls::RootCertStore::empty();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn tls_sni_whole_and_in_pieces() {
        let hello = client_hello("Allowed.Test");
        let want = Sniffed::Done {
            proto: Proto::Tls,
            name: Some("allowed.test".into()),
        };
        assert_eq!(sniff(&hello), want);
        assert_eq!(sniff(&hello[..20]), Sniffed::NeedMore);
        // An IP address is sent without SNI.
        let bare = client_hello("203.0.113.10");
        assert_eq!(
            sniff(&bare),
            Sniffed::Done {
                proto: Proto::Tls,
                name: None
            }
        );
    }

    #[test]
    fn http_host_and_its_conflicts() {
        let get = |s: &str| sniff(s.as_bytes());
        assert_eq!(
            get("GET / HTTP/1.1\r\nHost: allowed.test"),
            Sniffed::NeedMore
        );
        assert_eq!(
            get("GET / HTTP/1.1\r\nHost: Allowed.Test:8080\r\n\r\n"),
            Sniffed::Done {
                proto: Proto::Http,
                name: Some("allowed.test".into())
            }
        );
        assert_eq!(
            get("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"),
            Sniffed::Conflict
        );
        assert_eq!(
            get("GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"),
            Sniffed::Conflict
        );
        assert_eq!(
            get("GET / HTTP/1.0\r\n\r\n"),
            Sniffed::Done {
                proto: Proto::Http,
                name: None
            }
        );
        assert_eq!(
            sniff(b"SSH-2.0-x\r\n"),
            Sniffed::Done {
                proto: Proto::Other,
                name: None
            }
        );
        assert_eq!(
            sniff(b"\x00\x01"),
            Sniffed::Done {
                proto: Proto::Other,
                name: None
            }
        );
        assert_eq!(host_of("[2001:db8::1]:443"), "2001:db8::1");
        assert_eq!(host_of("user@x.test:80"), "x.test");
    }
}
