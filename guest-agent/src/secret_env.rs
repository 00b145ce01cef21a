//! The secrets' placeholders and trust variables a contained computer's commands and terminals
//! get (docs/security.md#secrets): `NAME=value` lines of the file `RAKAZO_SECRETS_FILE` names,
//! read afresh for every command, so a secret set while the computer runs reaches the next one.
//! The file holds placeholders only; the values never enter the computer.
//!
//! Only `RAKAZO_SECRET_*` and the CA-bundle variables are taken, each bounded; anything else in
//! the file is ignored.

use std::ffi::OsStr;

/// The guest's variable naming the file (set by the local provider).
pub const SECRETS_FILE_VAR: &str = "RAKAZO_SECRETS_FILE";
/// Largest file read.
const MAX_FILE: u64 = 64 << 10;
/// Most variables taken.
const MAX_VARS: usize = 300;

/// The variables of the file `file` names (none when unset, missing or unreadable).
pub fn vars(file: Option<&OsStr>) -> Vec<(String, String)> {
    use std::io::Read;
    let Some(file) = file else {
        return Vec::new();
    };
    let Ok(f) = std::fs::File::open(file) else {
        return Vec::new();
    };
    let mut text = String::new();
    if f.take(MAX_FILE).read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    parse(&text)
}

static FILE: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();

/// Keeps the guest's `RAKAZO_SECRETS_FILE` before `config::Env::settle` removes it.
pub fn remember(file: Option<std::ffi::OsString>) {
    let _ = FILE.set(file);
}

/// The file this guest was given, if any.
fn file() -> Option<&'static OsStr> {
    FILE.get().and_then(|f| f.as_deref())
}

/// [`vars`] of this guest's secrets file.
pub fn from_process() -> Vec<(String, String)> {
    vars(file())
}

/// The variable of the file naming the computer's egress CA certificate (PEM).
const EGRESS_CA_VAR: &str = "RAKAZO_EGRESS_CA=";
/// The CA's nickname in Chrome's store.
const NSS_NICKNAME: &str = "Rakazo egress CA";
/// Bound on one `certutil` run.
const CERTUTIL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The computer's egress CA certificate (PEM) when this is a contained computer with secrets:
/// what Chrome and the fake browser provider trust besides the system's authorities.
pub fn egress_ca() -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(file()?).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(EGRESS_CA_VAR))
        .filter(|p| p.starts_with('/'))
        .map(std::path::PathBuf::from)
}

/// Chrome trusts its own store (NSS, `$HOME/.pki/nssdb`), not the system bundle: the computer's
/// egress CA is put there (replacing an older one: a restarted control plane makes a new CA)
/// before Chrome starts, with Debian's `certutil` (`libnss3-tools`). Nothing to do outside a
/// contained computer with secrets; a failure is logged and Chrome starts anyway (secrets'
/// domains then fail TLS in it, nothing else changes).
pub async fn trust_in_chrome(home: &std::path::Path) {
    let Some(ca) = egress_ca() else {
        return;
    };
    let ca = ca.to_string_lossy().into_owned();
    let db = home.join(".pki").join("nssdb");
    if let Err(e) = std::fs::create_dir_all(&db) {
        tracing::warn!(error = %e, "cannot create Chrome's certificate store");
        return;
    }
    let db = format!("sql:{}", db.display());
    let certutil = |args: Vec<&str>| {
        let mut cmd = tokio::process::Command::new("certutil");
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        async move {
            match tokio::time::timeout(CERTUTIL_TIMEOUT, cmd.output()).await {
                Ok(Ok(out)) if out.status.success() => Ok(()),
                Ok(Ok(out)) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("certutil timed out".to_string()),
            }
        }
    };
    if !home.join(".pki/nssdb/cert9.db").exists() {
        if let Err(e) = certutil(vec!["-N", "-d", &db, "--empty-password"]).await {
            tracing::warn!(error = %e, "cannot create Chrome's certificate store");
            return;
        }
    }
    let _ = certutil(vec!["-D", "-d", &db, "-n", NSS_NICKNAME]).await;
    if let Err(e) = certutil(vec![
        "-A",
        "-d",
        &db,
        "-n",
        NSS_NICKNAME,
        "-t",
        "C,,",
        "-i",
        &ca,
    ])
    .await
    {
        tracing::warn!(error = %e, "cannot add the egress CA to Chrome's certificate store");
    }
}

fn parse(text: &str) -> Vec<(String, String)> {
    const TRUST: [&str; 4] = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    ];
    text.lines()
        .filter_map(|line| {
            let (k, v) = line.split_once('=')?;
            let secret = k.strip_prefix("RAKAZO_SECRET_").is_some_and(|n| {
                !n.is_empty()
                    && n.len() <= 64
                    && n.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            });
            let ok_value =
                !v.is_empty() && v.len() <= 4096 && v.bytes().all(|b| b.is_ascii_graphic());
            ((secret || TRUST.contains(&k)) && ok_value).then(|| (k.to_string(), v.to_string()))
        })
        .take(MAX_VARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_placeholders_and_trust_variables_are_taken() {
        let text = "RAKAZO_SECRET_GITHUB=rakazo-secret-github-00\nSSL_CERT_FILE=/etc/ssl/x.crt\n\
                    LD_PRELOAD=/tmp/evil.so\nRAKAZO_SECRET_bad=x\nRAKAZO_SECRET_E=\nPATH=/tmp\n";
        assert_eq!(
            parse(text),
            vec![
                (
                    "RAKAZO_SECRET_GITHUB".into(),
                    "rakazo-secret-github-00".into()
                ),
                ("SSL_CERT_FILE".into(), "/etc/ssl/x.crt".into()),
            ]
        );
        assert!(vars(None).is_empty());
        assert!(vars(Some(OsStr::new("/nonexistent/secrets.env"))).is_empty());
    }
}
