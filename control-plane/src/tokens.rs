//! Scoped API tokens and console sessions (docs/security.md#api-tokens).
//!
//! A token has a role ([`Role`]: admin, operator, viewer) and optionally a list of workspaces it
//! is limited to; the server's own `--token` is an unrestricted admin and no row. Tokens are
//! shown once: only their SHA-256 is stored (`api_tokens`, migration 0013), and a request's token
//! is found by its digest. A console session is a random cookie whose digest is stored with the
//! token it was opened with and its CSRF token (`console_sessions`); revoking a token ends its
//! sessions because a session is only as good as its token ([`TokenStore::session`] reads both).
//!
//! What a role may do is the route table's (`crate::route`): each route names the least role it
//! needs. Which computers a token sees is [`Principal::sees`]: those of its workspaces; a
//! computer it does not see answers exactly as a missing one does.

use crate::computers::{Computer, ComputerKind};
use crate::db::{column, Db, DbError};
use base64::Engine;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Prefix of every token this module makes, so a leaked one is recognisable (and greppable).
pub const TOKEN_PREFIX: &str = "rkz_";
/// Name of the console's session cookie.
pub const SESSION_COOKIE: &str = "rakazo_session";
/// How long a console session lasts (it never outlives its token).
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most workspaces a token may be limited to.
pub const MAX_WORKSPACES: usize = 64;
/// Most tokens a server keeps (revoked ones included until deleted by hand).
pub const MAX_TOKENS: i64 = 10_000;
/// Longest token name.
pub const MAX_NAME: usize = 64;

/// What a token may do, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Watch screens, read computers, jobs, activity and files.
    Viewer,
    /// Also create, start and stop computers, take control, use shells, files and bots.
    Operator,
    /// Everything: destroy, network policies, secrets, homes' maintenance, metrics, tokens.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Result<Role, TokenError> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(TokenError::Bad(format!(
                "role must be admin, operator or viewer, got {:?}",
                other.chars().take(32).collect::<String>()
            ))),
        }
    }
}

/// Who a request is: what its token may do and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's id; `None` for the server's own token.
    pub token_id: Option<String>,
    pub name: String,
    pub role: Role,
    /// The workspaces it is limited to; `None`: every computer.
    pub workspaces: Option<Vec<String>>,
    /// When its token expires (ms), if it does.
    pub expires_at_ms: Option<i64>,
}

impl Principal {
    /// The server's own token.
    pub fn server() -> Self {
        Self {
            token_id: None,
            name: "server".into(),
            role: Role::Admin,
            workspaces: None,
            expires_at_ms: None,
        }
    }

    /// Whether it sees computers of workspace `ws`.
    pub fn sees_workspace(&self, ws: &str) -> bool {
        match &self.workspaces {
            None => true,
            Some(list) => list.iter().any(|w| w == ws),
        }
    }

    /// Whether it sees computer `c`: a limited token sees the team computers of its workspaces
    /// only (a private computer belongs to no workspace).
    pub fn sees(&self, c: &Computer) -> bool {
        match (&self.workspaces, &c.kind) {
            (None, _) => true,
            (Some(_), ComputerKind::Team { workspace }) => self.sees_workspace(workspace.as_str()),
            (Some(_), ComputerKind::Private { .. } | ComputerKind::Pool { .. }) => false,
        }
    }

    /// Whether it sees everything (the routes that are on no computer or workspace need it).
    pub fn unlimited(&self) -> bool {
        self.workspaces.is_none()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{0}")]
    Bad(String),
    #[error("no token {0}")]
    NotFound(String),
    #[error("this server holds {MAX_TOKENS} tokens already: revoke and delete some")]
    TooMany,
    #[error(transparent)]
    Db(#[from] DbError),
}

/// What to make a token with.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub name: String,
    pub role: Role,
    pub workspaces: Option<Vec<String>>,
    pub expires_at_ms: Option<i64>,
}

/// A stored token, as listed (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub principal: Principal,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

/// A console session, as its cookie finds it.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
    pub expires_at_ms: i64,
}

#[derive(Debug, Clone)]
pub struct TokenStore {
    db: Db,
}

fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// 32 random bytes, base64url.
fn random_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Checks a token's name and workspaces as the API takes them.
fn check(new: &NewToken) -> Result<(), TokenError> {
    let name_ok = !new.name.is_empty()
        && new.name.len() <= MAX_NAME
        && new
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' ' | '@'));
    if !name_ok {
        return Err(TokenError::Bad(format!(
            "a token's name is 1 to {MAX_NAME} letters, digits, spaces or -_.@"
        )));
    }
    if let Some(list) = &new.workspaces {
        if list.is_empty() || list.len() > MAX_WORKSPACES {
            return Err(TokenError::Bad(format!(
                "a token is limited to 1 to {MAX_WORKSPACES} workspaces (none: every computer)"
            )));
        }
        for ws in list {
            crate::computers::WorkspaceId::new(ws.clone())
                .map_err(|e| TokenError::Bad(format!("workspace: {e}")))?;
        }
    }
    Ok(())
}

impl TokenStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Makes a token; returns its info and its value (shown once, never stored).
    pub async fn create(
        &self,
        new: NewToken,
        now_ms: i64,
    ) -> Result<(TokenInfo, String), TokenError> {
        check(&new)?;
        let row = sqlx::query("SELECT COUNT(*) AS n FROM api_tokens")
            .fetch_one(self.db.pool())
            .await
            .map_err(DbError::from)?;
        let n: i64 = column(&row, "api_tokens", "*", "n")?;
        if n >= MAX_TOKENS {
            return Err(TokenError::TooMany);
        }
        let id = format!(
            "tok_{}",
            hex::encode(rand::random::<[u8; 6]>()) // 48 bits: an id, not a secret
        );
        let value = format!("{TOKEN_PREFIX}{}", random_secret());
        let workspaces = new
            .workspaces
            .as_ref()
            .map(|w| serde_json::to_string(w).expect("strings serialize"));
        sqlx::query(
            "INSERT INTO api_tokens (id, name, role, workspaces, sha256, created_at, expires_at, \
             revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
        )
        .bind(&id)
        .bind(&new.name)
        .bind(new.role.as_str())
        .bind(workspaces)
        .bind(digest(&value))
        .bind(now_ms)
        .bind(new.expires_at_ms)
        .execute(self.db.pool())
        .await
        .map_err(DbError::from)?;
        let info = TokenInfo {
            principal: Principal {
                token_id: Some(id.clone()),
                name: new.name,
                role: new.role,
                workspaces: new.workspaces,
                expires_at_ms: new.expires_at_ms,
            },
            id,
            created_at_ms: now_ms,
            revoked_at_ms: None,
        };
        Ok((info, value))
    }

    fn info(row: &sqlx::any::AnyRow) -> Result<TokenInfo, DbError> {
        let id: String = column(row, "api_tokens", "?", "id")?;
        let role: String = column(row, "api_tokens", &id, "role")?;
        let role = Role::parse(&role)
            .map_err(|e| DbError::corrupt("api_tokens", &id, format!("role: {e}")))?;
        let workspaces: Option<String> = column(row, "api_tokens", &id, "workspaces")?;
        let workspaces = match workspaces {
            None => None,
            Some(text) => Some(
                serde_json::from_str::<Vec<String>>(&text)
                    .map_err(|e| DbError::corrupt("api_tokens", &id, format!("workspaces: {e}")))?,
            ),
        };
        Ok(TokenInfo {
            principal: Principal {
                token_id: Some(id.clone()),
                name: column(row, "api_tokens", &id, "name")?,
                role,
                workspaces,
                expires_at_ms: column(row, "api_tokens", &id, "expires_at")?,
            },
            created_at_ms: column(row, "api_tokens", &id, "created_at")?,
            revoked_at_ms: column(row, "api_tokens", &id, "revoked_at")?,
            id,
        })
    }

    /// Every token, oldest first.
    pub async fn list(&self) -> Result<Vec<TokenInfo>, DbError> {
        let rows = sqlx::query(
            "SELECT id, name, role, workspaces, created_at, expires_at, revoked_at \
             FROM api_tokens ORDER BY created_at, id",
        )
        .fetch_all(self.db.pool())
        .await?;
        rows.iter().map(Self::info).collect()
    }

    /// Revokes token `id` and ends its console sessions. Revoking twice is no error.
    pub async fn revoke(&self, id: &str, now_ms: i64) -> Result<TokenInfo, TokenError> {
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1",
        )
        .bind(id)
        .bind(now_ms)
        .execute(self.db.pool())
        .await
        .map_err(DbError::from)?;
        if done.rows_affected() == 0 {
            return Err(TokenError::NotFound(id.chars().take(64).collect()));
        }
        sqlx::query("DELETE FROM console_sessions WHERE token_id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await
            .map_err(DbError::from)?;
        let row = sqlx::query(
            "SELECT id, name, role, workspaces, created_at, expires_at, revoked_at \
             FROM api_tokens WHERE id = $1",
        )
        .bind(id)
        .fetch_one(self.db.pool())
        .await
        .map_err(DbError::from)?;
        Ok(Self::info(&row)?)
    }

    /// The principal of a presented token that is this store's, live (not revoked, not
    /// expired); `None` otherwise. Only tokens with [`TOKEN_PREFIX`] are looked up.
    pub async fn verify(&self, presented: &str, now_ms: i64) -> Result<Option<Principal>, DbError> {
        if !presented.starts_with(TOKEN_PREFIX) || presented.len() > 128 {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT id, name, role, workspaces, created_at, expires_at, revoked_at \
             FROM api_tokens WHERE sha256 = $1",
        )
        .bind(digest(presented))
        .fetch_optional(self.db.pool())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let info = Self::info(&row)?;
        Ok(live(info, now_ms))
    }

    async fn by_id(&self, id: &str) -> Result<Option<TokenInfo>, DbError> {
        let row = sqlx::query(
            "SELECT id, name, role, workspaces, created_at, expires_at, revoked_at \
             FROM api_tokens WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        row.as_ref().map(Self::info).transpose()
    }

    /// Opens a console session for `principal`; returns the cookie's value and the session.
    pub async fn open_session(
        &self,
        principal: Principal,
        now_ms: i64,
    ) -> Result<(String, Session), DbError> {
        let cookie = random_secret();
        let csrf = random_secret();
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        let mut expires = now_ms.saturating_add(ttl);
        if let Some(t) = principal.expires_at_ms {
            expires = expires.min(t);
        }
        // Expired sessions are swept as new ones open: the table stays the size of its use.
        sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1")
            .bind(now_ms)
            .execute(self.db.pool())
            .await?;
        sqlx::query(
            "INSERT INTO console_sessions (sha256, token_id, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(digest(&cookie))
        .bind(principal.token_id.clone())
        .bind(&csrf)
        .bind(now_ms)
        .bind(expires)
        .execute(self.db.pool())
        .await?;
        Ok((
            cookie,
            Session {
                principal,
                csrf,
                expires_at_ms: expires,
            },
        ))
    }

    /// The live session of a cookie's value: unexpired, and its token still live.
    pub async fn session(&self, cookie: &str, now_ms: i64) -> Result<Option<Session>, DbError> {
        if cookie.is_empty() || cookie.len() > 128 {
            return Ok(None);
        }
        let key = digest(cookie);
        let row = sqlx::query(
            "SELECT token_id, csrf, expires_at FROM console_sessions WHERE sha256 = $1",
        )
        .bind(&key)
        .fetch_optional(self.db.pool())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let expires_at_ms: i64 = column(&row, "console_sessions", "?", "expires_at")?;
        if expires_at_ms <= now_ms {
            return Ok(None);
        }
        let token_id: Option<String> = column(&row, "console_sessions", "?", "token_id")?;
        let principal = match token_id {
            None => Principal::server(),
            Some(id) => match self.by_id(&id).await?.and_then(|i| live(i, now_ms)) {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        Ok(Some(Session {
            principal,
            csrf: column(&row, "console_sessions", "?", "csrf")?,
            expires_at_ms,
        }))
    }

    /// Ends the session of a cookie's value (no error when there is none).
    pub async fn close_session(&self, cookie: &str) -> Result<(), DbError> {
        sqlx::query("DELETE FROM console_sessions WHERE sha256 = $1")
            .bind(digest(cookie))
            .execute(self.db.pool())
            .await?;
        Ok(())
    }
}

/// A token's principal while it is live.
fn live(info: TokenInfo, now_ms: i64) -> Option<Principal> {
    if info.revoked_at_ms.is_some() {
        return None;
    }
    if info.principal.expires_at_ms.is_some_and(|t| t <= now_ms) {
        return None;
    }
    Some(info.principal)
}

/// Parses a duration as the CLI takes `--expires`: `90s`, `45m`, `12h`, `30d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: a number then s, m, h or d (30d)"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?}: a number then s, m, h or d (30d)")),
    };
    let d = n
        .checked_mul(secs)
        .filter(|&t| t > 0 && t <= 10 * 366 * 86_400)
        .ok_or_else(|| format!("{s:?}: between 1s and 10 years"))?;
    Ok(Duration::from_secs(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    async fn sqlite_memory() -> Db {
        crate::db::testing::sqlite().await.unwrap()
    }

    fn new(role: Role, ws: Option<&[&str]>) -> NewToken {
        NewToken {
            name: "t".into(),
            role,
            workspaces: ws.map(|w| w.iter().map(|s| s.to_string()).collect()),
            expires_at_ms: None,
        }
    }

    #[tokio::test]
    async fn tokens_are_found_by_value_until_revoked_or_expired() {
        let store = TokenStore::new(sqlite_memory().await);
        let (info, value) = store
            .create(new(Role::Viewer, Some(&["acme"])), 1_000)
            .await
            .unwrap();
        assert!(value.starts_with(TOKEN_PREFIX));
        let p = store.verify(&value, 2_000).await.unwrap().unwrap();
        assert_eq!(
            (p.role, p.workspaces.clone()),
            (Role::Viewer, Some(vec!["acme".into()]))
        );
        assert!(p.sees_workspace("acme") && !p.sees_workspace("other"));
        assert!(store.verify("rkz_wrong", 2_000).await.unwrap().is_none());
        assert!(store.verify(&value[1..], 2_000).await.unwrap().is_none());
        let (cookie, session) = store.open_session(p, 2_000).await.unwrap();
        assert!(store.session(&cookie, 3_000).await.unwrap().is_some());
        assert_eq!(session.csrf.len(), 43);
        store.revoke(&info.id, 4_000).await.unwrap();
        assert!(store.verify(&value, 5_000).await.unwrap().is_none());
        assert!(store.session(&cookie, 5_000).await.unwrap().is_none());
        let mut short = new(Role::Admin, None);
        short.expires_at_ms = Some(10_000);
        let (_, value) = store.create(short, 1_000).await.unwrap();
        assert!(store.verify(&value, 9_999).await.unwrap().is_some());
        assert!(store.verify(&value, 10_000).await.unwrap().is_none());
        assert_eq!(store.list().await.unwrap().len(), 2);
        assert!(matches!(
            store.revoke("tok_missing", 1).await,
            Err(TokenError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn bad_names_and_workspaces_are_refused() {
        let store = TokenStore::new(sqlite_memory().await);
        let mut t = new(Role::Viewer, Some(&[]));
        assert!(store.create(t.clone(), 1).await.is_err());
        t.workspaces = Some(vec!["bad/ws".into()]);
        assert!(store.create(t.clone(), 1).await.is_err());
        t.workspaces = None;
        t.name = "x\ny".into();
        assert!(store.create(t, 1).await.is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        for bad in ["", "d", "10", "10y", "0s", "-1d", "99999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
