//! Sealed capability tokens (docs/security.md#capability-urls): what goes in a browser-facing URL.
//!
//! A token is `base64url(header || nonce || ciphertext)` where the header is the format version,
//! the policy and the expiry, the nonce is 12 random bytes, and the ciphertext is AES-256-GCM of
//! the [`Scope`] with the header as additional data. Changing any byte (policy, expiry, nonce,
//! ciphertext, tag), cutting the token short or opening it with another key fails, and so does
//! opening it at or after its expiry: every failure is the same [`SealError`], so nothing tells
//! a prober which part was wrong. Whether the scope still matches the database (generations,
//! control lease) is the caller's check; this module reads no clock and no database.

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use base64::Engine;
use gateway_proto::live::{valid_control_lease_id, CapabilityKind};
use gateway_proto::BotId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a capability URL can be opened (docs/security.md#capability-urls: 60 minutes).
pub const CAPABILITY_TTL: Duration = Duration::from_secs(60 * 60);

/// Format version of the header; a token of another version never opens.
const VERSION: u8 = 1;
const HEADER_LEN: usize = 1 + 1 + 8;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// Longest token accepted (base64 characters): a capability's scope is well under 200 bytes,
/// an attachment's holds a path of up to [`MAX_ATTACHMENT_PATH`] bytes.
pub const MAX_TOKEN_LEN: usize = 2048;
/// Longest path an attachment token carries.
pub const MAX_ATTACHMENT_PATH: usize = 1024;

/// What a capability reaches, sealed inside its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    pub computer: String,
    pub bot: BotId,
    /// The computer's screen generation when the URL was issued.
    pub computer_generation: u64,
    /// The bot's screen generation on that computer when the URL was issued.
    pub bot_generation: u64,
    /// The user's control lease the URL was issued under (control and terminal only).
    pub control_lease: Option<String>,
}

/// What an attachment URL reaches, sealed inside its token: one file of one computer's home,
/// as a bot handed it out (`attach_file`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentScope {
    pub computer: String,
    pub bot: BotId,
    /// Relative to the home, as the bot named it.
    pub path: String,
    /// The file's size when it was attached; a file that changed size since is refused.
    pub size: u64,
}

/// The policy byte of attachment tokens (capabilities use 1–3).
const ATTACHMENT_POLICY: u8 = 4;

/// What an MCP session token opens, sealed inside it: the MCP endpoint of one bot on one
/// computer (`crate::mcp`), nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpScope {
    pub computer: String,
    pub bot: BotId,
}

/// The policy byte of MCP session tokens.
const MCP_POLICY: u8 = 5;

/// What a preview's tokens reach, sealed inside them: one preview (docs/previews.md#access).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewScope {
    pub preview: String,
}

/// What a preview token is for. Each has its own policy byte, so none opens as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviewToken {
    /// In a link preview's URL, or handed back by the console for a session preview: opened
    /// once, on the preview's origin, for a [`PreviewToken::Cookie`].
    Open,
    /// The preview origin's cookie that lets its visitor in.
    Cookie,
}

impl PreviewToken {
    fn policy(self) -> u8 {
        match self {
            PreviewToken::Open => 6,
            PreviewToken::Cookie => 7,
        }
    }
}

/// An opened token: its policy, expiry and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    pub policy: CapabilityKind,
    pub expires_at_ms: i64,
    pub scope: Scope,
}

/// A token that does not open: forged, tampered, truncated, expired or sealed by another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("capability token is invalid or expired")]
pub struct SealError;

/// Seals and opens capability tokens with one AES-256 key.
#[derive(Clone)]
pub struct Sealer {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(***)")
    }
}

fn policy_byte(p: CapabilityKind) -> u8 {
    match p {
        CapabilityKind::View => 1,
        CapabilityKind::Control => 2,
        CapabilityKind::Terminal => 3,
    }
}

fn policy_of(b: u8) -> Option<CapabilityKind> {
    match b {
        1 => Some(CapabilityKind::View),
        2 => Some(CapabilityKind::Control),
        3 => Some(CapabilityKind::Terminal),
        _ => None,
    }
}

fn header(policy: u8, expires_at_ms: i64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = VERSION;
    h[1] = policy;
    h[2..].copy_from_slice(&expires_at_ms.to_be_bytes());
    h
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            cipher: Aes256Gcm::new(key.into()),
        }
    }

    /// Seals `scope` under `policy` until `expires_at_ms`. Fails only for a scope that could
    /// never be opened (a control lease id the guest would refuse).
    pub fn seal(
        &self,
        policy: CapabilityKind,
        expires_at_ms: i64,
        scope: &Scope,
    ) -> Result<String, SealError> {
        if scope
            .control_lease
            .as_deref()
            .is_some_and(|id| !valid_control_lease_id(id))
        {
            return Err(SealError);
        }
        self.seal_bytes(policy_byte(policy), expires_at_ms, scope)
    }

    /// Opens a token at `now_ms`: the capability if it is intact and not expired.
    pub fn open(&self, token: &str, now_ms: i64) -> Result<Capability, SealError> {
        let (policy, expires_at_ms, scope) = self.open_bytes(token, now_ms)?;
        let policy = policy_of(policy).ok_or(SealError)?;
        Ok(Capability {
            policy,
            expires_at_ms,
            scope,
        })
    }

    /// Seals a file a bot hands out (`attach_file`) until `expires_at_ms`.
    pub fn seal_attachment(
        &self,
        expires_at_ms: i64,
        scope: &AttachmentScope,
    ) -> Result<String, SealError> {
        self.seal_bytes(ATTACHMENT_POLICY, expires_at_ms, scope)
    }

    /// Opens an attachment token at `now_ms`. A capability token never opens as one, nor the
    /// other way round: the policy byte is authenticated.
    pub fn open_attachment(
        &self,
        token: &str,
        now_ms: i64,
    ) -> Result<(i64, AttachmentScope), SealError> {
        match self.open_bytes(token, now_ms)? {
            (ATTACHMENT_POLICY, expires_at_ms, scope) => Ok((expires_at_ms, scope)),
            _ => Err(SealError),
        }
    }

    /// Seals an MCP session token for one computer and bot until `expires_at_ms`.
    pub fn seal_mcp(&self, expires_at_ms: i64, scope: &McpScope) -> Result<String, SealError> {
        self.seal_bytes(MCP_POLICY, expires_at_ms, scope)
    }

    /// Opens an MCP session token at `now_ms`. No capability or attachment token opens as one,
    /// nor the other way round: the policy byte is authenticated.
    pub fn open_mcp(&self, token: &str, now_ms: i64) -> Result<(i64, McpScope), SealError> {
        match self.open_bytes(token, now_ms)? {
            (MCP_POLICY, expires_at_ms, scope) => Ok((expires_at_ms, scope)),
            _ => Err(SealError),
        }
    }

    /// Seals a preview token of `kind` until `expires_at_ms`.
    pub fn seal_preview(
        &self,
        kind: PreviewToken,
        expires_at_ms: i64,
        scope: &PreviewScope,
    ) -> Result<String, SealError> {
        self.seal_bytes(kind.policy(), expires_at_ms, scope)
    }

    /// Opens a preview token of `kind` at `now_ms`; a token of any other kind never opens.
    pub fn open_preview(
        &self,
        kind: PreviewToken,
        token: &str,
        now_ms: i64,
    ) -> Result<(i64, PreviewScope), SealError> {
        match self.open_bytes(token, now_ms)? {
            (p, expires_at_ms, scope) if p == kind.policy() => Ok((expires_at_ms, scope)),
            _ => Err(SealError),
        }
    }

    fn seal_bytes<T: Serialize>(
        &self,
        policy: u8,
        expires_at_ms: i64,
        scope: &T,
    ) -> Result<String, SealError> {
        let plaintext = postcard::to_allocvec(scope).map_err(|_| SealError)?;
        let head = header(policy, expires_at_ms);
        let nonce: [u8; NONCE_LEN] = rand::random();
        let ciphertext = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &plaintext,
                    aad: &head,
                },
            )
            .map_err(|_| SealError)?;
        let mut raw = Vec::with_capacity(HEADER_LEN + NONCE_LEN + ciphertext.len());
        raw.extend_from_slice(&head);
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&ciphertext);
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        if token.len() > MAX_TOKEN_LEN {
            return Err(SealError);
        }
        Ok(token)
    }

    /// The authentic policy byte, expiry and payload of an intact, unexpired token.
    fn open_bytes<T: DeserializeOwned>(
        &self,
        token: &str,
        now_ms: i64,
    ) -> Result<(u8, i64, T), SealError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(SealError);
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| SealError)?;
        if raw.len() < HEADER_LEN + NONCE_LEN + TAG_LEN {
            return Err(SealError);
        }
        let (head, rest) = raw.split_at(HEADER_LEN);
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let plaintext = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: head,
                },
            )
            .map_err(|_| SealError)?;
        // The header is authentic from here on.
        if head[0] != VERSION {
            return Err(SealError);
        }
        let mut expiry = [0u8; 8];
        expiry.copy_from_slice(&head[2..]);
        let expires_at_ms = i64::from_be_bytes(expiry);
        if now_ms >= expires_at_ms {
            return Err(SealError);
        }
        let (payload, extra): (T, &[u8]) =
            postcard::take_from_bytes(&plaintext).map_err(|_| SealError)?;
        if !extra.is_empty() {
            return Err(SealError);
        }
        Ok((head[1], expires_at_ms, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const EXP: i64 = NOW + 3_600_000;

    fn scope() -> Scope {
        Scope {
            computer: "c-0123456789abcdef".into(),
            bot: BotId::new("bot-1").unwrap(),
            computer_generation: 3,
            bot_generation: 7,
            control_lease: Some("cl-abc".into()),
        }
    }

    fn sealer() -> Sealer {
        Sealer::new(&[7u8; 32])
    }

    fn raw(token: &str) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .unwrap()
    }

    fn enc(raw: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    #[test]
    fn a_sealed_scope_opens_until_its_expiry() {
        let s = sealer();
        let t = s.seal(CapabilityKind::Control, EXP, &scope()).unwrap();
        let cap = s.open(&t, NOW).unwrap();
        assert_eq!(cap.policy, CapabilityKind::Control);
        assert_eq!(cap.expires_at_ms, EXP);
        assert_eq!(cap.scope, scope());
        assert!(s.open(&t, EXP - 1).is_ok());
        assert_eq!(s.open(&t, EXP), Err(SealError), "expiry is exclusive");
        assert_eq!(s.open(&t, EXP + 1), Err(SealError));
        assert!(t.len() <= MAX_TOKEN_LEN);
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn an_mcp_token_opens_only_as_one() {
        let s = sealer();
        let mine = McpScope {
            computer: "c-0123456789abcdef".into(),
            bot: BotId::new("bot-1").unwrap(),
        };
        let t = s.seal_mcp(EXP, &mine).unwrap();
        assert_eq!(s.open_mcp(&t, NOW), Ok((EXP, mine)));
        assert_eq!(s.open(&t, NOW), Err(SealError));
        assert_eq!(s.open_attachment(&t, NOW), Err(SealError));
        assert_eq!(s.open_mcp(&t, EXP), Err(SealError), "expiry is exclusive");
        let cap = s.seal(CapabilityKind::View, EXP, &scope()).unwrap();
        assert_eq!(s.open_mcp(&cap, NOW), Err(SealError));
        assert_eq!(Sealer::new(&[8u8; 32]).open_mcp(&t, NOW), Err(SealError));
    }

    fn attachment() -> AttachmentScope {
        AttachmentScope {
            computer: "c-0123456789abcdef".into(),
            bot: BotId::new("bot-1").unwrap(),
            path: format!("bots/bot-1/{}", "r".repeat(MAX_ATTACHMENT_PATH - 11)),
            size: 42,
        }
    }

    #[test]
    fn an_attachment_opens_until_its_expiry_and_never_as_a_capability() {
        let s = sealer();
        let t = s.seal_attachment(EXP, &attachment()).unwrap();
        assert!(t.len() <= MAX_TOKEN_LEN, "{}", t.len());
        assert_eq!(s.open_attachment(&t, NOW).unwrap(), (EXP, attachment()));
        assert_eq!(s.open_attachment(&t, EXP), Err(SealError));
        assert_eq!(s.open(&t, NOW), Err(SealError));
        for policy in [
            CapabilityKind::View,
            CapabilityKind::Control,
            CapabilityKind::Terminal,
        ] {
            let cap = s.seal(policy, EXP, &scope()).unwrap();
            assert_eq!(s.open_attachment(&cap, NOW), Err(SealError));
        }
        let mut bytes = raw(&t);
        bytes[1] = 1;
        assert_eq!(s.open_attachment(&enc(&bytes), NOW), Err(SealError));
        assert_eq!(s.open(&enc(&bytes), NOW), Err(SealError));
    }

    #[test]
    fn two_seals_of_one_scope_differ() {
        let s = sealer();
        let a = s.seal(CapabilityKind::View, EXP, &scope()).unwrap();
        let b = s.seal(CapabilityKind::View, EXP, &scope()).unwrap();
        assert_ne!(a, b, "a fresh nonce every time");
    }

    #[test]
    fn a_swapped_policy_fails_closed() {
        let s = sealer();
        let t = s.seal(CapabilityKind::View, EXP, &scope()).unwrap();
        for p in [2u8, 3, 0, 9] {
            let mut r = raw(&t);
            r[1] = p;
            assert_eq!(s.open(&enc(&r), NOW), Err(SealError), "policy byte {p}");
        }
    }

    #[test]
    fn an_extended_expiry_fails_closed() {
        let s = sealer();
        let t = s.seal(CapabilityKind::View, NOW + 1000, &scope()).unwrap();
        let mut r = raw(&t);
        r[2..10].copy_from_slice(&(NOW + 10_000_000).to_be_bytes());
        assert_eq!(s.open(&enc(&r), NOW), Err(SealError));
    }

    #[test]
    fn any_flipped_bit_fails_closed() {
        let s = sealer();
        let t = s.seal(CapabilityKind::Terminal, EXP, &scope()).unwrap();
        let r = raw(&t);
        for i in 0..r.len() {
            let mut bad = r.clone();
            bad[i] ^= 0x01;
            assert_eq!(s.open(&enc(&bad), NOW), Err(SealError), "byte {i}");
        }
    }

    #[test]
    fn truncation_fails_closed() {
        let s = sealer();
        let t = s.seal(CapabilityKind::View, EXP, &scope()).unwrap();
        for n in 0..t.len() {
            assert_eq!(s.open(&t[..n], NOW), Err(SealError), "first {n} chars");
        }
        let r = raw(&t);
        assert_eq!(s.open(&enc(&r[..r.len() - 1]), NOW), Err(SealError));
    }

    #[test]
    fn another_key_fails_closed() {
        let t = sealer().seal(CapabilityKind::View, EXP, &scope()).unwrap();
        assert_eq!(Sealer::new(&[8u8; 32]).open(&t, NOW), Err(SealError));
    }

    #[test]
    fn garbage_and_oversized_tokens_fail_closed() {
        let s = sealer();
        for t in [
            "",
            "!!!",
            "AAAA",
            &"A".repeat(MAX_TOKEN_LEN + 1),
            "a/b",
            "a.b",
        ] {
            assert_eq!(s.open(t, NOW), Err(SealError), "{t:?}");
        }
        let t = s.seal(CapabilityKind::View, EXP, &scope()).unwrap();
        assert_eq!(s.open(&format!("{t}A"), NOW), Err(SealError));
    }

    #[test]
    fn an_invalid_control_lease_id_is_never_sealed() {
        let mut sc = scope();
        sc.control_lease = Some("../x".into());
        assert_eq!(
            sealer().seal(CapabilityKind::Control, EXP, &sc),
            Err(SealError)
        );
    }
}
