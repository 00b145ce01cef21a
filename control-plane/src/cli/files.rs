//! `rakazo files …`: list, read and write files of a computer's live home
//! (`/v1/computers/{id}/files…`).

use super::ids;
use super::{print_entries, print_json, Global};
use crate::client::{full_body, json_answer};
use crate::route::{ComputerId, Route};
use crate::schema::files::{AttachRequest, Attached, FileList, Uploaded, Written};
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use clap::Subcommand;
use http_body_util::BodyExt;
use hyper::Method;
use std::io::Write;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum FilesCmd {
    /// List a directory of the home.
    Ls {
        computer: String,
        #[arg(default_value = "")]
        path: String,
    },
    /// Print a file of the home to stdout.
    Cat {
        computer: String,
        path: String,
        #[arg(long)]
        max_bytes: Option<u64>,
    },
    /// Upload a local file into the home.
    Put {
        computer: String,
        local: PathBuf,
        remote: String,
        /// Make it executable (mode 0700 instead of 0600).
        #[arg(long, short = 'x')]
        executable: bool,
    },
    /// Upload a local file into a bot's directory as its user: needs your control of the bot
    /// (`screen takeover` prints the control lease) and never replaces a file.
    Upload {
        computer: String,
        bot: String,
        local: PathBuf,
        /// The control lease from `screen takeover`.
        #[arg(long)]
        control: String,
        /// The file name in the computer (default: the local file's name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Hand a file of the home out as a download URL (a bot's `attach_file`, under its lease).
    Attach {
        computer: String,
        path: String,
        #[arg(long)]
        bot: String,
        /// The bot's execution lease.
        #[arg(long)]
        lease: String,
    },
}

/// `PUT`s a local file to `url`, streamed with its length; the answer as JSON.
async fn put_file<R: serde::de::DeserializeOwned>(
    c: &crate::client::Client,
    url: &str,
    local: &PathBuf,
) -> Result<R> {
    let file = tokio::fs::File::open(local)
        .await
        .with_context(|| format!("open {}", local.display()))?;
    let len = file.metadata().await?.len();
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    let body = http_body_util::StreamBody::new(futures_util::StreamExt::map(stream, |r| {
        r.map(hyper::body::Frame::data)
    }));
    let resp = c
        .send(
            Method::PUT,
            url,
            Some("application/octet-stream"),
            Some(len),
            body.boxed(),
        )
        .await?;
    Ok(json_answer(resp).await?)
}

pub(super) async fn run(g: &Global, cmd: FilesCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        FilesCmd::Ls { computer, path } => {
            let list: FileList = c
                .fetch(
                    Method::GET,
                    &Route::ListFiles {
                        computer: ComputerId::new(computer),
                    }
                    .path_with_query([("path", path.as_str())]),
                )
                .await?;
            if g.json {
                print_json(&list);
            } else {
                print_entries(&list.entries);
            }
        }
        FilesCmd::Cat {
            computer,
            path,
            max_bytes,
        } => {
            let max_bytes = max_bytes.map(|m| m.to_string());
            let mut query = vec![("path", path.as_str())];
            query.extend(max_bytes.as_deref().map(|m| ("max_bytes", m)));
            let url = Route::ReadFile {
                computer: ComputerId::new(computer),
            }
            .path_with_query(query);
            let resp = c
                .send(Method::GET, &url, None, None, full_body(Bytes::new()))
                .await?;
            let mut body = resp.into_body();
            let mut out = std::io::stdout().lock();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| anyhow!("download broke: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    out.write_all(&data)?;
                }
            }
            out.flush()?;
        }
        FilesCmd::Put {
            computer,
            local,
            remote,
            executable,
        } => {
            let executable = executable.to_string();
            let url = Route::WriteFile {
                computer: ComputerId::new(computer),
            }
            .path_with_query([("path", remote.as_str()), ("executable", &executable)]);
            let written: Written = put_file(&c, &url, &local).await?;
            if g.json {
                print_json(&written)
            } else {
                println!("wrote {} bytes to {remote}", written.written);
            }
        }
        FilesCmd::Upload {
            computer,
            bot,
            local,
            control,
            name,
        } => {
            let name = match name {
                Some(n) => n,
                None => local
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| anyhow!("{} has no file name; pass --name", local.display()))?
                    .to_string(),
            };
            let (computer, bot) = ids(&computer, &bot)?;
            let url = Route::UploadToBot { computer, bot }
                .path_with_query([("name", name.as_str()), ("control", &control)]);
            let up: Uploaded = put_file(&c, &url, &local).await?;
            if g.json {
                print_json(&up)
            } else {
                println!("uploaded {} bytes to {}", up.size, up.path);
            }
        }
        FilesCmd::Attach {
            computer,
            path,
            bot,
            lease,
        } => {
            let att: Attached = c
                .call(
                    Method::POST,
                    &Route::AttachFile {
                        computer: ComputerId::new(computer),
                    }
                    .path(),
                    &AttachRequest { path, bot, lease },
                )
                .await?;
            if g.json {
                print_json(&att)
            } else {
                println!("{}", att.url);
            }
        }
    }
    Ok(0)
}
