//! A directory as a blob: its entries, sorted by name, each with its mode, mtime and what it is
//! (a file's size and chunk ids, a directory's tree id, a symlink's target). JSON, hex ids.
//! Every tree is checked as it is read: names are single path components (not empty, `.`, `..`,
//! no `/` or NUL), unique and sorted, so a restore can never be led outside its root.

use super::CasError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The name; its lossy form when it is not UTF-8 (then `raw` holds its bytes).
    pub name: String,
    /// The name's bytes in hex when they are not UTF-8 (Linux names are bytes; the archive
    /// keeps them exactly, and so does a tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    #[serde(flatten)]
    pub node: Node,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Node {
    File {
        size: u64,
        /// Chunk ids, in order; their plaintexts concatenate to the file.
        chunks: Vec<String>,
    },
    Dir {
        tree: String,
    },
    Symlink {
        target: String,
    },
}

impl Entry {
    /// The name's bytes: `raw` decoded when present, else `name`'s.
    pub fn name_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, CasError> {
        match &self.raw {
            None => Ok(self.name.as_bytes().into()),
            Some(h) => hex::decode(h)
                .map(Into::into)
                .map_err(|_| CasError::Corrupt(format!("a raw name {:?}", truncate(h)))),
        }
    }

    /// An entry's `name` and `raw` for the name `bytes`.
    pub fn names(bytes: &[u8]) -> (String, Option<String>) {
        match std::str::from_utf8(bytes) {
            Ok(s) => (s.to_owned(), None),
            Err(_) => (
                String::from_utf8_lossy(bytes).into_owned(),
                Some(hex::encode(bytes)),
            ),
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Whether `name` is one plain path component (as bytes).
pub fn plain_bytes(name: &[u8]) -> bool {
    !name.is_empty()
        && name != b"."
        && name != b".."
        && !name.iter().any(|&b| b == b'/' || b == 0)
        && name.len() <= 255
}

/// Whether `name` is one plain path component.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
        && name.len() <= 255
}

impl Tree {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a tree serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Tree, CasError> {
        let t: Tree =
            serde_json::from_slice(bytes).map_err(|e| CasError::Corrupt(format!("a tree: {e}")))?;
        let mut last: Option<Vec<u8>> = None;
        for e in &t.entries {
            let name = e.name_bytes()?;
            if !plain_bytes(&name) {
                return Err(CasError::BadPath(truncate(&e.name)));
            }
            if last.as_deref().is_some_and(|l| l >= &name[..]) {
                return Err(CasError::Corrupt(
                    "a tree's names are not sorted and unique".into(),
                ));
            }
            last = Some(name.into_owned());
            if e.mode > 0o7777 {
                return Err(CasError::Corrupt(format!("mode {:o}", e.mode)));
            }
        }
        Ok(t)
    }
}
