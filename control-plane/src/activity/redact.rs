//! Redaction of everything the feed stores: a pure function of the text and the values to hide.
//!
//! What is replaced by [`MASK`]:
//! - the values of the environment variables passed to the command (given by the caller), wherever
//!   they appear, when at least [`MIN_LITERAL`] bytes long (a shorter value cannot be told apart
//!   from ordinary output);
//! - credentials in URLs (`https://user:pass@host` → `https://***@host`);
//! - the word after `Bearer`/`Basic`/`Token` and after an `Authorization` name;
//! - well-known key shapes wherever they stand: `sk-…`, `sk_live_…`, `ghp_…` (and GitHub's other
//!   prefixes), `github_pat_…`, `glpat-…`, `xox?-…` (Slack), `AKIA…`/`ASIA…` (AWS), `AIza…`,
//!   `hf_…`, `npm_…`;
//! - the value of anything named like a secret (a name containing `password`, `passwd`, `secret`,
//!   `token`, `api_key`/`apikey`/`api-key`, `access_key`, `private_key`, `credential`, `auth`,
//!   `pwd`), in the forms `NAME=value`, `--name=value`, `--name value`, `name: value` and
//!   `"name": "value"`;
//! - `-p<value>` (the MySQL form) unless the value is a number (`ssh -p2222`).
//!
//! Text the bot types (desktop `type` actions, browser `fill`/`type` steps, which may be a password
//! field's content) is never recorded at all, so nothing here has to recognise it.
//! Redaction is conservative: it may hide a harmless word next to a secret-looking name, never the
//! other way round for the shapes above.

/// What a redacted value is replaced with.
pub const MASK: &str = "***";
/// Shortest environment value searched for in the text.
pub const MIN_LITERAL: usize = 4;

/// Prefixes of API keys that are secrets wherever they stand, with the least number of key
/// characters that must follow.
const KEY_PREFIXES: &[(&str, usize)] = &[
    ("sk-", 8),
    ("sk_live_", 8),
    ("sk_test_", 8),
    ("rk_live_", 8),
    ("ghp_", 8),
    ("gho_", 8),
    ("ghu_", 8),
    ("ghs_", 8),
    ("ghr_", 8),
    ("github_pat_", 8),
    ("glpat-", 8),
    ("xoxb-", 6),
    ("xoxp-", 6),
    ("xoxa-", 6),
    ("xoxs-", 6),
    ("xoxr-", 6),
    ("xoxe-", 6),
    ("AKIA", 12),
    ("ASIA", 12),
    ("AIza", 16),
    ("hf_", 12),
    ("npm_", 12),
];

/// Parts of names whose values are secrets (compared in lower case).
const SECRET_NAMES: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "accesskey",
    "access-key",
    "private_key",
    "private-key",
    "credential",
    "auth",
    "pwd",
];

/// Options that start with `-p` and are not `-p<password>` (find, mkdir, gcc, ps, …).
const NOT_PASSWORDS: &[&str] = &[
    "arents", "ath", "erm", "id", "rint", "rint0", "rintf", "rune", "thread", "edantic", "ipe",
    "ie", "ic", "g", "s", "ush", "ull",
];

/// Words after which the next word is a credential.
const SCHEMES: &[&str] = &["bearer", "basic", "token", "digest"];

/// `text` with every secret it holds replaced by [`MASK`]; `literals` are values known to be
/// secret (the command's environment).
pub fn redact(text: &str, literals: &[&str]) -> String {
    let mut out = text.to_string();
    // Longest first, so a value that contains another is masked whole.
    let mut lits: Vec<&str> = literals
        .iter()
        .copied()
        .filter(|l| l.len() >= MIN_LITERAL)
        .collect();
    lits.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for l in lits {
        if out.contains(l) {
            out = out.replace(l, MASK);
        }
    }
    let out = url_credentials(&out);
    let mut lines: Vec<String> = Vec::new();
    for line in out.split('\n') {
        lines.push(words(line));
    }
    lines.join("\n")
}

/// Masks the user information of every `scheme://user[:pass]@host`.
fn url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first of these.
        let end = tail
            .find(|c: char| {
                c == '/'
                    || c == '?'
                    || c == '#'
                    || c.is_whitespace()
                    || c == '"'
                    || c == '\''
                    || c == '`'
                    || c == '>'
                    || c == '<'
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) if at > 0 => {
                out.push_str(MASK);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Characters that may surround a value without being part of it.
fn is_wrap(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | '`' | '\\' | ',' | ';' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>'
    )
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Whether a name (of a variable, flag or field) says its value is secret.
fn secret_name(name: &str) -> bool {
    let name = name
        .trim_matches(|c: char| is_wrap(c) || c == '-' || c == '$')
        .to_ascii_lowercase();
    !name.is_empty() && SECRET_NAMES.iter().any(|s| name.contains(s))
}

/// Masks the core of `word` (what is inside its quotes and punctuation), keeping the rest.
fn mask_core(word: &str) -> String {
    let start = word.find(|c: char| !is_wrap(c)).unwrap_or(word.len());
    let end = word.rfind(|c: char| !is_wrap(c)).map_or(start, |i| {
        i + word[i..].chars().next().map_or(1, char::len_utf8)
    });
    if start >= end {
        return word.to_string();
    }
    format!("{}{MASK}{}", &word[..start], &word[end..])
}

/// Masks API-key shapes anywhere inside `word`.
fn key_shapes(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut i = 0;
    'scan: while i < word.len() {
        let boundary = i == 0 || !is_key_char(word[..i].chars().next_back().unwrap_or(' '));
        if boundary {
            for (prefix, min) in KEY_PREFIXES {
                if word[i..].starts_with(prefix) {
                    let body_start = i + prefix.len();
                    let body_len = word[body_start..]
                        .find(|c: char| !is_key_char(c))
                        .unwrap_or(word.len() - body_start);
                    if body_len >= *min {
                        out.push_str(MASK);
                        i = body_start + body_len;
                        continue 'scan;
                    }
                }
            }
        }
        let c = word[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// One line: whitespace kept as it is, each word looked at with the words before it.
fn words(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    // The next word is a secret (after `--token`, `Bearer`, `password:`).
    let mut next_secret = false;
    // After `Authorization:`: the next word is a secret unless it is a scheme word.
    let mut after_auth_name = false;
    let mut rest = line;
    while !rest.is_empty() {
        let ws = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..ws]);
        rest = &rest[ws..];
        if rest.is_empty() {
            break;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        let core = word.trim_matches(is_wrap);
        let lower = core.to_ascii_lowercase();
        if after_auth_name {
            after_auth_name = false;
            if SCHEMES.contains(&lower.as_str()) {
                out.push_str(word);
                next_secret = true;
            } else {
                out.push_str(&mask_core(word));
            }
            continue;
        }
        if next_secret {
            next_secret = false;
            out.push_str(&mask_core(word));
            continue;
        }
        if SCHEMES.contains(&lower.as_str()) && !rest.trim().is_empty() {
            out.push_str(word);
            // `token` alone is often an ordinary word; after `Authorization` it is handled
            // above. Bearer and Basic are followed by credentials.
            next_secret = lower != "token";
            continue;
        }
        out.push_str(&assignment(word, &mut next_secret, &mut after_auth_name));
    }
    out
}

/// A word that may be `name=value`, `--name=value`, `name:value`, `--name`, `-pvalue`, or
/// hold a key shape; sets `next_secret` when the value is the next word.
fn assignment(word: &str, next_secret: &mut bool, after_auth_name: &mut bool) -> String {
    let core = word.trim_matches(is_wrap);
    let lead = &word[..word.len() - word.trim_start_matches(is_wrap).len()];
    // `-p<secret>`: MySQL's password form; a number is a port (`ssh -p2222`).
    if let Some(v) = core.strip_prefix("-p") {
        let flag = NOT_PASSWORDS.contains(&v) || v.chars().all(|c| c.is_ascii_digit());
        if !v.is_empty() && !v.starts_with('-') && !flag {
            return format!("{lead}-p{MASK}");
        }
    }
    if let Some(sep) = core.find(['=', ':']) {
        let (name, value) = (&core[..sep], &core[sep + 1..]);
        let name_lower = name.to_ascii_lowercase();
        if name_lower.trim_matches(|c: char| is_wrap(c) || c == '-') == "authorization" {
            if value.trim_matches(is_wrap).is_empty() {
                *after_auth_name = true;
                return word.to_string();
            }
            return format!("{lead}{name}{}{MASK}", &core[sep..=sep]);
        }
        if secret_name(name) {
            if value.trim_matches(is_wrap).is_empty() {
                *next_secret = true;
                return word.to_string();
            }
            // Keep the quotes around the value (`"password":"x"`) and what follows it.
            let v = value.trim_start_matches(is_wrap);
            let vlead = &value[..value.len() - v.len()];
            let vend = v.find(is_wrap).unwrap_or(v.len());
            // A quoted value that goes on past this word (`PASS='two words'`): the next word
            // is part of it.
            if let Some(q) = vlead.chars().find(|c| matches!(c, '"' | '\'' | '`')) {
                if !v.contains(q) && !word[lead.len() + core.len()..].contains(q) {
                    *next_secret = true;
                }
            }
            return format!(
                "{lead}{name}{}{vlead}{MASK}{}",
                &core[sep..=sep],
                &v[vend..]
            ) + &word[lead.len() + core.len()..];
        }
        return key_shapes(word);
    }
    if core.starts_with('-') && secret_name(core) {
        *next_secret = true;
        return word.to_string();
    }
    if core.eq_ignore_ascii_case("authorization") {
        *after_auth_name = true;
        return word.to_string();
    }
    key_shapes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> String {
        redact(text, &[])
    }

    #[track_caller]
    fn hidden(text: &str, secret: &str) {
        let out = r(text);
        assert!(!out.contains(secret), "{secret:?} survives in {out:?}");
        assert!(out.contains(MASK), "{out:?}");
    }

    #[test]
    fn environment_values_are_masked_wherever_they_appear() {
        let out = redact(
            "connecting with hunter2-long and again hunter2-long; x=1",
            &["hunter2-long", "1"],
        );
        assert_eq!(out, "connecting with *** and again ***; x=1");
        // The longer of two overlapping values is masked whole.
        assert_eq!(redact("abcdefgh", &["abcd", "abcdefgh"]), "***");
    }

    #[test]
    fn url_credentials_are_masked_and_the_host_kept() {
        assert_eq!(
            r("git clone https://alice:s3cretpw@example.com/repo.git"),
            "git clone https://***@example.com/repo.git"
        );
        assert_eq!(
            r("curl 'ftp://tok@h:21/x' http://plain.example/a@b"),
            "curl 'ftp://***@h:21/x' http://plain.example/a@b"
        );
    }

    #[test]
    fn bearer_and_authorization_values_are_masked() {
        assert_eq!(
            r("curl -H 'Authorization: Bearer abc.def.ghi' https://api"),
            "curl -H 'Authorization: Bearer ***' https://api"
        );
        hidden("authorization=Zm9vOmJhcg==", "Zm9vOmJhcg");
        hidden("Authorization: Basic Zm9vOmJhcg==", "Zm9vOmJhcg");
        hidden("Authorization: token gh-opaque-value", "gh-opaque-value");
        hidden("got bearer eyJhbGciOi.payload.sig", "eyJhbGciOi");
    }

    #[test]
    fn key_shapes_are_masked_anywhere() {
        for (text, secret) in [
            ("key sk-proj-AbCdEf0123456789", "AbCdEf0123456789"),
            (
                "echo ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "ghp_abcdef",
            ),
            ("file notes/ghp_abcdefghij0123456789.txt", "ghp_abcdefghij"),
            ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
            ("slack xoxb-1234-5678-abcdefgh", "1234-5678"),
            ("x=github_pat_11ABCDEFG0123456789", "11ABCDEFG"),
            ("glpat-abcdefghijkl", "abcdefghijkl"),
        ] {
            hidden(text, secret);
        }
        // Too short to be a key, or not at a word boundary: kept.
        assert_eq!(r("task-list desk-top sk-1"), "task-list desk-top sk-1");
    }

    #[test]
    fn named_secrets_are_masked_in_every_form() {
        assert_eq!(r("mysql --password=pa55word db"), "mysql --password=*** db");
        assert_eq!(r("tool --token abc123xyz go"), "tool --token *** go");
        assert_eq!(r("mysql -ppa55word db"), "mysql -p*** db");
        assert_eq!(r("ssh -p2222 host"), "ssh -p2222 host");
        assert_eq!(r("find . -print -perm 644"), "find . -print -perm 644");
        assert_eq!(r("API_KEY=0123456789abcdef0123 ./run"), "API_KEY=*** ./run");
        assert_eq!(
            r("export DB_PASSWORD='two words'"),
            "export DB_PASSWORD='*** ***'"
        );
        assert_eq!(
            r(r#"{"secret":"v4lue","n":1}"#),
            r#"{"secret":"***","n":1}"#
        );
        assert_eq!(
            r(r#""client_secret": "v4lue","#),
            r#""client_secret": "***","#
        );
        assert_eq!(r("password: letmein"), "password: ***");
        assert_eq!(
            r("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG"),
            "AWS_SECRET_ACCESS_KEY=***"
        );
        // Ordinary names are left alone.
        assert_eq!(r("PATH=/usr/bin make -j4"), "PATH=/usr/bin make -j4");
    }

    /// A script quoted for a shell (`'\''` around an inner quote), as the feed shows argv.
    #[test]
    fn shell_quoted_secrets_are_masked() {
        let line = r"sh -c 'echo '\''Authorization: Bearer eyJsecretvalue'\''; echo ok'";
        let out = r(line);
        assert!(!out.contains("eyJsecretvalue"), "{out}");
        assert!(out.contains("Bearer ***"), "{out}");
    }

    #[test]
    fn lines_and_whitespace_are_kept() {
        assert_eq!(r("a  b\n\ttoken=x1\nc"), "a  b\n\ttoken=***\nc");
    }
}
