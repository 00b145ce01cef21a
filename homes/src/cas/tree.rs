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
    pub name: String,
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
        let mut last: Option<&str> = None;
        for e in &t.entries {
            if !plain_name(&e.name) {
                return Err(CasError::BadPath(e.name.chars().take(80).collect()));
            }
            if last.is_some_and(|l| l >= e.name.as_str()) {
                return Err(CasError::Corrupt(
                    "a tree's names are not sorted and unique".into(),
                ));
            }
            last = Some(&e.name);
            if e.mode > 0o7777 {
                return Err(CasError::Corrupt(format!("mode {:o}", e.mode)));
            }
        }
        Ok(t)
    }
}
