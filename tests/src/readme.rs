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

/// One `rakazo …` command of a README block: its arguments after `rakazo`, the stdin an `echo …
/// |` before it pipes in, and the comment on its line.
pub struct Command {
    pub args: Vec<String>,
    pub stdin: Option<String>,
    pub comment: String,
}

/// The `rakazo …` commands of the block under `heading`, in order: lines continued with `\`
/// joined, ` ; ` separating commands, a comment starting at ` #` (the blocks have no `#` inside
/// quotes).
pub fn commands(heading: &str) -> Result<Vec<Command>> {
    let block = block(heading)?;
    let mut steps = Vec::new();
    let mut joined = String::new();
    for raw in block.lines() {
        let (code, comment) = raw.split_once(" #").unwrap_or((raw, ""));
        let code = code.trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            joined.push_str(head);
            continue;
        }
        joined.push_str(code);
        for part in std::mem::take(&mut joined).split(" ; ") {
            let (stdin, cmd) = match part.split_once(" | ") {
                Some((feed, cmd)) => {
                    let words = shell_words(feed);
                    anyhow::ensure!(words.first().map(String::as_str) == Some("echo"), "{part}");
                    (Some(format!("{}\n", words[1..].join(" "))), cmd)
                }
                None => (None, part),
            };
            let words = shell_words(cmd);
            if words.first().map(String::as_str) == Some("rakazo") {
                steps.push(Command {
                    args: words[1..].to_vec(),
                    stdin,
                    comment: comment.trim().to_string(),
                });
            }
        }
    }
    Ok(steps)
}
