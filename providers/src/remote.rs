//! What the adapters of sandbox services (`e2b`, `daytona`) share: their HTTP client
//! ([`http`]), the form of a sandbox id, and the environment a guest starts with there.

pub mod http;

use crate::{ProviderError, ProviderRef, SandboxSpec};
use std::collections::BTreeMap;

const PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A sandbox id usable in a URL path and a host name: `[A-Za-z0-9_-]`, 1 to 128 characters.
pub(crate) fn sandbox_id(r: &ProviderRef) -> Result<&str, ProviderError> {
    let id = r.0.as_str();
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    if ok {
        Ok(id)
    } else {
        Err(ProviderError::BadRef(r.0.clone()))
    }
}

/// The guest's environment in a sandbox: how it dials home, its home, where its token is
/// (never the token itself), then `extra` (log filter and the like).
pub(crate) fn guest_env(
    spec: &SandboxSpec,
    home: &str,
    token_path: &str,
    extra: &[(String, String)],
) -> BTreeMap<String, String> {
    let g = &spec.guest;
    let mut env: BTreeMap<String, String> = [
        ("PATH", PATH_ENV.to_string()),
        ("LANG", "C.UTF-8".to_string()),
        ("RAKAZO_CONTROL_ADDR", g.control_addr.to_string()),
        ("RAKAZO_CONTROL_TCP_ADDR", g.tcp_addr().to_string()),
        ("RAKAZO_CONTROL_CERT_SHA256", g.cert_sha256.clone()),
        ("RAKAZO_COMPUTER_ID", spec.computer_id.clone()),
        ("RAKAZO_HOME", home.to_string()),
        ("RAKAZO_ENROLL_TOKEN_FILE", token_path.to_string()),
    ]
    .into_iter()
    .chain(g.ws_env())
    .chain(g.replicas_env())
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(extra.iter().cloned());
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuestEnrollment, MachineLimits, Secret};

    #[test]
    fn sandbox_ids_are_plain_words() {
        assert!(sandbox_id(&ProviderRef("i2x8k3c9a1b7d4e6f0g5h".into())).is_ok());
        assert!(sandbox_id(&ProviderRef("3fa85f64-5717-4562-b3fc-2c963f66afa6".into())).is_ok());
        for bad in ["", "a/b", "a.b", "../x", "a b", &"a".repeat(129)] {
            assert!(
                matches!(
                    sandbox_id(&ProviderRef(bad.into())),
                    Err(ProviderError::BadRef(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_guest_env_names_the_token_file_not_the_token() {
        let spec = SandboxSpec {
            computer_id: "c-1".into(),
            home_key: "team-w".into(),
            guest: GuestEnrollment {
                control_addr: "127.0.0.1:7443".parse().unwrap(),
                control_ws: None,
                control_tcp_addr: None,
                other_replicas: Vec::new(),
                cert_sha256: "ab".into(),
                token: Secret("t0ken-never-in-env".into()),
            },
            limits: MachineLimits::default(),
            placement: None,
            network: None,
        };
        let env = guest_env(
            &spec,
            "/h",
            "/etc/t",
            &[("RAKAZO_LOG".into(), "info".into())],
        );
        assert_eq!(env["RAKAZO_ENROLL_TOKEN_FILE"], "/etc/t");
        assert_eq!(env["RAKAZO_CONTROL_TCP_ADDR"], "127.0.0.1:7443");
        assert_eq!(env["RAKAZO_LOG"], "info");
        assert!(env.values().all(|v| !v.contains("t0ken")));
        assert!(!env.contains_key("RAKAZO_CONTROL_WS_URL"));
        assert!(
            !env.contains_key("RAKAZO_CONTROL_ADDRS"),
            "no other replicas"
        );
        let mut spec = spec;
        spec.guest.other_replicas = vec![
            "10.0.0.2:7443".parse().unwrap(),
            "[2001:db8::2]:7443".parse().unwrap(),
        ];
        spec.guest.control_ws = Some(crate::ControlWs {
            url: "https://cp.example/v1/tunnel".into(),
            api_cert_sha256: Some("cd".into()),
        });
        let env = guest_env(&spec, "/h", "/etc/t", &[]);
        assert_eq!(env["RAKAZO_CONTROL_WS_URL"], "https://cp.example/v1/tunnel");
        assert_eq!(env["RAKAZO_CONTROL_API_CERT_SHA256"], "cd");
        assert_eq!(
            env["RAKAZO_CONTROL_ADDRS"],
            "10.0.0.2:7443,[2001:db8::2]:7443"
        );
    }
}
