//! What a fully contained computer holds for its secrets (docs/security.md#secrets): its
//! placeholders and the certificate of its CA, never a secret's value nor the CA's key.
//!
//! Two files in the computer's directory, root's, 0644, rewritten in place (same inode: the
//! jail binds them at start, and a later change must show through):
//! - `ca-certificates.crt`: this host's CA bundle plus the computer's CA certificate, bound
//!   read-only over `/etc/ssl/certs/ca-certificates.crt` inside the jail, so OpenSSL, GnuTLS,
//!   curl and everything reading the system store trust the gateway's leaves for secrets'
//!   domains (and, being the whole host bundle, every real server as before);
//! - `secrets.env`: `NAME=value` lines the guest adds to every command's and terminal's
//!   environment (`RAKAZO_SECRETS_FILE` tells it where): `RAKAZO_SECRET_<NAME>=<placeholder>`
//!   for each secret, and the variables pointing runtimes with their own stores (Python
//!   requests, Node) at the bundle;
//! - `egress-ca.pem`: the CA certificate alone, which the guest adds to each bot's Chrome
//!   store (NSS, `$HOME/.pki/nssdb`) before starting it (`RAKAZO_EGRESS_CA` names it).

use crate::ProviderError;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The system CA bundle (Debian's), on the host and inside the jail.
pub(crate) const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The computer's bundle, in its directory.
pub(crate) const BUNDLE_FILE: &str = "ca-certificates.crt";
/// The placeholders, in its directory.
pub(crate) const ENV_FILE: &str = "secrets.env";
/// The computer's CA certificate alone, in its directory (for Chrome's NSS store: the guest
/// adds it there, `RAKAZO_EGRESS_CA` in [`ENV_FILE`] names it).
pub(crate) const CA_FILE: &str = "egress-ca.pem";
/// The guest's variable naming [`ENV_FILE`].
pub const SECRETS_FILE_VAR: &str = "RAKAZO_SECRETS_FILE";

/// The variable a secret's placeholder is in: `RAKAZO_SECRET_` and the name upper-cased, `-`
/// as `_` (`github-token` → `RAKAZO_SECRET_GITHUB_TOKEN`).
pub fn env_name(secret: &str) -> String {
    let name: String = secret
        .chars()
        .map(|c| match c {
            '-' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("RAKAZO_SECRET_{name}")
}

/// Writes the computer's bundle: this host's and `ca_pem`. Returns its path.
pub(crate) fn write_bundle(dir: &Path, ca_pem: &str) -> Result<PathBuf, ProviderError> {
    let mut bundle = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(b"# Rakazo: this computer's egress CA (secrets' domains only)\n");
    bundle.extend_from_slice(ca_pem.as_bytes());
    write_in_place(&dir.join(CA_FILE), ca_pem.as_bytes())?;
    let path = dir.join(BUNDLE_FILE);
    write_in_place(&path, &bundle)?;
    Ok(path)
}

/// Writes the computer's placeholders (`(secret name, placeholder)`).
pub(crate) fn write_env(
    dir: &Path,
    placeholders: &[(String, String)],
) -> Result<(), ProviderError> {
    let mut text = String::new();
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    ] {
        text.push_str(&format!("{var}={SYSTEM_BUNDLE}\n"));
    }
    text.push_str(&format!(
        "RAKAZO_EGRESS_CA={}\n",
        dir.join(CA_FILE).display()
    ));
    for (name, placeholder) in placeholders {
        text.push_str(&format!("{}={placeholder}\n", env_name(name)));
    }
    write_in_place(&dir.join(ENV_FILE), text.as_bytes())
}

/// Writes `bytes` into `path`, root's 0644, keeping its inode when it is already such a file of
/// ours; never through a link the computer's user planted (the directory is theirs).
fn write_in_place(path: &Path, bytes: &[u8]) -> Result<(), ProviderError> {
    let err = |e| ProviderError::io(format!("write {}", path.display()), e);
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut file = match open() {
        Ok(f) => {
            let meta = f.metadata().map_err(err)?;
            if meta.is_file() && meta.uid() == me && meta.nlink() == 1 {
                Some(f)
            } else {
                None
            }
        }
        Err(_) => None,
    };
    if file.is_none() {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        file = Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(path)
                .map_err(err)?,
        );
    }
    let Some(mut file) = file else {
        return Err(err(std::io::Error::other("not opened")));
    };
    file.set_len(0).map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_hold_placeholders_and_the_ca_and_keep_their_inode() {
        let dir = tempfile::tempdir().unwrap();
        let placeholders = vec![("github-token".to_string(), "rakazo-secret-x".to_string())];
        write_env(dir.path(), &placeholders).unwrap();
        let env = std::fs::read_to_string(dir.path().join(ENV_FILE)).unwrap();
        assert!(
            env.contains("RAKAZO_SECRET_GITHUB_TOKEN=rakazo-secret-x\n"),
            "{env}"
        );
        assert!(env.contains(&format!("SSL_CERT_FILE={SYSTEM_BUNDLE}\n")));
        let path = write_bundle(dir.path(), "-----BEGIN CERTIFICATE-----\n").unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        write_bundle(dir.path(), "second").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.ino(), inode);
        assert_eq!(meta.mode() & 0o777, 0o644);
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("second"));
        // A link planted in its place is replaced, never followed.
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        write_bundle(dir.path(), "third").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }
}
