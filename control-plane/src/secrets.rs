//! Workspaces' secrets that never enter a computer (docs/security.md#secrets).
//!
//! A secret is a value, the domains it may be sent to, an optional header template and a
//! placeholder. The value is stored only sealed (table `secrets`, migration 0012): AES-256-GCM
//! under the control plane's secrets key, with the workspace and name as additional data, so a
//! sealed value moved to another row does not open. It is opened only to hand the secret to the
//! egress gateway of the workspace's contained computers (`providers::local`), which puts it
//! into requests to the secret's domains; the computers hold the placeholder. Nothing here
//! logs, answers or records a value: [`SecretRecord`] has none, and errors name the secret only.

use crate::db::{column, Db, DbError};
use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use base64::Engine;
use sqlx::Row;

/// Most secrets a workspace holds.
pub const MAX_SECRETS: usize = 64;
/// Longest value, bytes.
pub const MAX_VALUE_LEN: usize = 4096;
/// Most domains per secret.
pub const MAX_DOMAINS: usize = 16;

const TABLE: &str = "secrets";
const SEAL_PREFIX: &str = "v1:";
const AAD: &[u8] = b"rakazo secret v1\0";

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// What the caller sent is not a secret (the message names the field, never the value).
    #[error("{0}")]
    Invalid(String),
    #[error("no secret {name:?} in workspace {workspace:?}")]
    NotFound { workspace: String, name: String },
    #[error("workspace {0:?} already has {MAX_SECRETS} secrets (the most it may hold)")]
    TooMany(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for SecretError {
    fn from(e: sqlx::Error) -> Self {
        SecretError::Db(e.into())
    }
}

/// A secret as stored, without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRecord {
    pub workspace: String,
    pub name: String,
    pub domains: Vec<String>,
    pub header: Option<String>,
    pub placeholder: String,
    pub created_at_ms: i64,
    pub rotated_at_ms: i64,
}

/// The key secrets are sealed with. `Debug` never shows it.
#[derive(Clone)]
pub struct SecretsKey([u8; 32]);

impl SecretsKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The secrets key of a control plane whose capability key is `capability` (shared by its
    /// replicas as that key is): SHA-256 of a label and it.
    pub fn derive(capability: &[u8; 32]) -> Self {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"rakazo secrets key v1\0");
        h.update(capability);
        Self(h.finalize().into())
    }
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(***)")
    }
}

fn aad(workspace: &str, name: &str) -> Vec<u8> {
    let mut aad = AAD.to_vec();
    aad.extend_from_slice(workspace.as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

/// Seals `value` for (workspace, name).
pub fn seal(key: &SecretsKey, workspace: &str, name: &str, value: &str) -> String {
    let cipher = Aes256Gcm::new((&key.0).into());
    let nonce: [u8; 12] = rand::random();
    let aad = aad(workspace, name);
    let payload = Payload {
        msg: value.as_bytes(),
        aad: &aad,
    };
    // AES-GCM fails only for messages of gigabytes; values are at most 4 KiB.
    let sealed = cipher
        .encrypt(Nonce::from_slice(&nonce), payload)
        .unwrap_or_default();
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    format!(
        "{SEAL_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(out)
    )
}

/// Opens what [`seal`] made for (workspace, name).
pub fn open(key: &SecretsKey, workspace: &str, name: &str, sealed: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(sealed.strip_prefix(SEAL_PREFIX)?)
        .ok()?;
    if bytes.len() < 12 + 16 {
        return None;
    }
    let (nonce, body) = bytes.split_at(12);
    let aad = aad(workspace, name);
    let plain = Aes256Gcm::new((&key.0).into())
        .decrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: body,
                aad: &aad,
            },
        )
        .ok()?;
    String::from_utf8(plain).ok()
}

/// Checks a secret as the gateway will take it; the gateway's form of it.
pub fn check(
    name: &str,
    domains: &[String],
    header: Option<&str>,
    placeholder: &str,
    value: &str,
) -> Result<egress::Secret, SecretError> {
    let invalid = |m: String| SecretError::Invalid(m);
    if value.is_empty() || value.len() > MAX_VALUE_LEN {
        return Err(invalid(format!(
            "a secret's value must be 1 to {MAX_VALUE_LEN} bytes"
        )));
    }
    if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err(invalid(
            "a secret's value must be visible ASCII and spaces (it goes into an HTTP header)"
                .into(),
        ));
    }
    if domains.is_empty() || domains.len() > MAX_DOMAINS {
        return Err(invalid(format!(
            "a secret needs 1 to {MAX_DOMAINS} domains"
        )));
    }
    let domains: Vec<&str> = domains.iter().map(String::as_str).collect();
    let secret = egress::Secret::with_placeholder(name, &domains, placeholder, value)
        .map_err(|e| invalid(e.to_string()))?;
    match header {
        Some(h) => secret.with_header(h).map_err(|e| invalid(e.to_string())),
        None => Ok(secret),
    }
}

/// The `secrets` table.
#[derive(Clone)]
pub struct SecretStore {
    db: Db,
    key: SecretsKey,
}

impl SecretStore {
    pub fn new(db: Db, key: SecretsKey) -> Self {
        Self { db, key }
    }

    /// Sets (or rotates) a secret; its placeholder and creation time stay when it existed.
    /// Returns it, and whether it was new.
    pub async fn put(
        &self,
        workspace: &str,
        name: &str,
        domains: &[String],
        header: Option<&str>,
        value: &str,
        now_ms: i64,
    ) -> Result<(SecretRecord, bool), SecretError> {
        let mut tx = self.db.begin_write().await?;
        let sql = format!(
            "SELECT placeholder, created_at FROM secrets WHERE workspace = $1 AND name = $2{}",
            self.db.for_update()
        );
        let existing = sqlx::query(&sql)
            .bind(workspace)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let (placeholder, created_at_ms) = match &existing {
            Some(row) => (
                column::<String>(row, TABLE, name, "placeholder")?,
                column::<i64>(row, TABLE, name, "created_at")?,
            ),
            None => (egress::secrets::new_placeholder(name), now_ms),
        };
        let secret = check(name, domains, header, &placeholder, value)?;
        let header = secret.header_template();
        let domains_json = serde_json::to_string(domains).unwrap_or_else(|_| "[]".into());
        let sealed = seal(&self.key, workspace, name, value);
        if existing.is_some() {
            sqlx::query(
                "UPDATE secrets SET domains = $3, header = $4, sealed = $5, rotated_at = $6 \
                 WHERE workspace = $1 AND name = $2",
            )
            .bind(workspace)
            .bind(name)
            .bind(&domains_json)
            .bind(header.as_deref())
            .bind(&sealed)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        } else {
            let count: i64 = sqlx::query("SELECT COUNT(*) AS n FROM secrets WHERE workspace = $1")
                .bind(workspace)
                .fetch_one(&mut *tx)
                .await?
                .try_get("n")?;
            if count >= MAX_SECRETS as i64 {
                return Err(SecretError::TooMany(workspace.to_string()));
            }
            sqlx::query(
                "INSERT INTO secrets (workspace, name, domains, header, placeholder, sealed, \
                 created_at, rotated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
            )
            .bind(workspace)
            .bind(name)
            .bind(&domains_json)
            .bind(header.as_deref())
            .bind(&placeholder)
            .bind(&sealed)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let record = SecretRecord {
            workspace: workspace.to_string(),
            name: name.to_string(),
            domains: domains.to_vec(),
            header,
            placeholder,
            created_at_ms,
            rotated_at_ms: now_ms,
        };
        Ok((record, existing.is_none()))
    }

    /// A workspace's secrets, by name, without values.
    pub async fn list(&self, workspace: &str) -> Result<Vec<SecretRecord>, SecretError> {
        Ok(self
            .rows(workspace)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }

    async fn rows(&self, workspace: &str) -> Result<Vec<(SecretRecord, String)>, SecretError> {
        let rows = sqlx::query(
            "SELECT name, domains, header, placeholder, sealed, created_at, rotated_at \
             FROM secrets WHERE workspace = $1 ORDER BY name",
        )
        .bind(workspace)
        .fetch_all(self.db.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = column(row, TABLE, workspace, "name")?;
            let key = format!("{workspace}/{name}");
            let domains: String = column(row, TABLE, &key, "domains")?;
            let domains: Vec<String> = serde_json::from_str(&domains)
                .map_err(|e| DbError::corrupt(TABLE, key.clone(), e.to_string()))?;
            out.push((
                SecretRecord {
                    workspace: workspace.to_string(),
                    domains,
                    header: column(row, TABLE, &key, "header")?,
                    placeholder: column(row, TABLE, &key, "placeholder")?,
                    created_at_ms: column(row, TABLE, &key, "created_at")?,
                    rotated_at_ms: column(row, TABLE, &key, "rotated_at")?,
                    name,
                },
                column(row, TABLE, &key, "sealed")?,
            ));
        }
        Ok(out)
    }

    /// Deletes a secret.
    pub async fn delete(&self, workspace: &str, name: &str) -> Result<(), SecretError> {
        let done = sqlx::query("DELETE FROM secrets WHERE workspace = $1 AND name = $2")
            .bind(workspace)
            .bind(name)
            .execute(self.db.pool())
            .await?;
        if done.rows_affected() == 0 {
            return Err(SecretError::NotFound {
                workspace: workspace.to_string(),
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// A workspace's secrets with their values opened, for its computers' gateway. One that
    /// does not open (another control plane's key) is left out with a warning naming it.
    pub async fn for_gateway(&self, workspace: &str) -> Result<Vec<egress::Secret>, SecretError> {
        let mut out = Vec::new();
        for (r, sealed) in self.rows(workspace).await? {
            let Some(value) = open(&self.key, workspace, &r.name, &sealed) else {
                tracing::warn!(workspace, secret = %r.name, "a secret does not open with this control plane's key: left out");
                continue;
            };
            match check(
                &r.name,
                &r.domains,
                r.header.as_deref(),
                &r.placeholder,
                &value,
            ) {
                Ok(s) => out.push(s),
                Err(e) => {
                    tracing::warn!(workspace, secret = %r.name, error = %e, "a stored secret is invalid: left out")
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "ghp_0123456789abcdef";

    #[test]
    fn sealed_values_open_only_for_their_row_and_key() {
        let key = SecretsKey::new([7; 32]);
        let sealed = seal(&key, "acme", "github", VALUE);
        assert!(!sealed.contains(VALUE));
        assert_eq!(
            open(&key, "acme", "github", &sealed).as_deref(),
            Some(VALUE)
        );
        assert_eq!(open(&key, "acme", "other", &sealed), None);
        assert_eq!(open(&key, "other", "github", &sealed), None);
        assert_eq!(
            open(&SecretsKey::new([8; 32]), "acme", "github", &sealed),
            None
        );
        assert!(!format!("{key:?}").contains('7'));
    }

    #[test]
    fn bad_secrets_are_refused_without_echoing_the_value() {
        let d = vec!["api.github.com".to_string()];
        let p = "rakazo-secret-github-00000000000000000000000000000000";
        for (name, domains, header, value) in [
            ("Bad", d.clone(), None, VALUE),
            ("ok", vec![], None, VALUE),
            ("ok", vec!["not a domain".to_string()], None, VALUE),
            ("ok", d.clone(), Some("X-Key: no-slot"), VALUE),
            ("ok", d.clone(), None, "line\nbreak ghp_secret"),
            ("ok", d.clone(), None, ""),
        ] {
            let e = check(name, &domains, header, p, value).unwrap_err();
            assert!(!e.to_string().contains("ghp_"), "{e}");
        }
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        assert!(check("ok", &d, None, p, &long).is_err());
        assert!(check("ok", &d, Some("Authorization: Bearer {}"), p, VALUE).is_ok());
    }

    #[tokio::test]
    async fn set_rotate_list_delete() {
        let db = crate::db::testing::sqlite().await.unwrap();
        let store = SecretStore::new(db.clone(), SecretsKey::new([1; 32]));
        let d = vec!["api.github.com".to_string()];
        let (first, new) = store
            .put("acme", "github", &d, None, VALUE, 10)
            .await
            .unwrap();
        assert!(new && first.placeholder.starts_with("rakazo-secret-github-"));
        let (rotated, new) = store
            .put(
                "acme",
                "github",
                &d,
                Some("Authorization: Bearer {}"),
                "v2",
                20,
            )
            .await
            .unwrap();
        assert!(!new);
        assert_eq!(rotated.placeholder, first.placeholder);
        assert_eq!((rotated.created_at_ms, rotated.rotated_at_ms), (10, 20));
        let listed = store.list("acme").await.unwrap();
        assert_eq!(listed, vec![rotated.clone()]);
        assert!(store.list("other").await.unwrap().is_empty());
        let gateway = store.for_gateway("acme").await.unwrap();
        assert_eq!(gateway.len(), 1);
        assert_eq!(gateway[0].placeholder(), first.placeholder);
        // Only sealed in the table.
        let raw: Vec<String> = sqlx::query("SELECT sealed FROM secrets")
            .fetch_all(db.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>("sealed"))
            .collect();
        assert!(raw
            .iter()
            .all(|s| s.starts_with("v1:") && !s.contains("v2")));
        store.delete("acme", "github").await.unwrap();
        assert!(matches!(
            store.delete("acme", "github").await,
            Err(SecretError::NotFound { .. })
        ));
        for i in 0..MAX_SECRETS {
            store
                .put("full", &format!("s{i}"), &d, None, VALUE, 1)
                .await
                .unwrap();
        }
        assert!(matches!(
            store.put("full", "one-more", &d, None, VALUE, 1).await,
            Err(SecretError::TooMany(_))
        ));
    }
}
