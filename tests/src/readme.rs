//! README.md as the tests run it: its `sh` blocks, split into words as a shell would.

use anyhow::{Context, Result};

/// The first ```` ```sh ```` block after the README.md heading `heading` (`## Secrets`): what the
/// tests run as written.
pub fn block(heading: &str) -> Result<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))?;
    readme
        .split_once(&format!("\n{heading}\n"))
        .and_then(|(_, rest)| rest.split_once("```sh\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block.to_string())
        .with_context(|| format!("README.md has no sh block under {heading:?}"))
}

/// Splits a command line as a shell would, for single quotes (what README.md's blocks use).
pub fn shell_words(s: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for ch in s.chars() {
        match ch {
            '\'' => (quoted, any) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}
