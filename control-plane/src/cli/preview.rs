//! `rakazo preview …`: preview URLs for a port inside a computer (docs/previews.md). `url`
//! prints the URL once, on standard output alone (the details go to standard error), so
//! `URL=$(rakazo preview url …)` keeps it out of the terminal's scrollback.

use super::{print_json, Global};
use crate::route::{ComputerId, Route};
use crate::schema::preview::{CreatePreview, CreatedPreview, Preview, PreviewList};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum PreviewCmd {
    /// Make a preview URL for a TCP port on the computer's loopback: its own origin, expiring
    /// and revocable. Access: link (the URL is the key), session (also a console session that
    /// sees the computer), public (anyone with the URL).
    Url {
        computer: String,
        port: u16,
        /// How long it works: `90m`, `12h`, `7d` (at most 30 days).
        #[arg(long, value_parser = crate::tokens::parse_duration, default_value = "60m")]
        expires: std::time::Duration,
        #[arg(long, value_parser = ["link", "session", "public"], default_value = "link")]
        access: String,
    },
    /// List a computer's preview URLs (never the URLs themselves).
    List {
        computer: String,
        /// Also expired and revoked ones.
        #[arg(long)]
        all: bool,
    },
    /// Revoke a preview URL by its id: refused from now on, its open connections closed.
    Revoke { computer: String, preview: String },
}

fn print_preview(p: &Preview) {
    println!(
        "{}\t{}\t{}\t{}\t{}",
        p.id, p.port, p.access, p.state, p.expires_at_ms
    );
}

pub(super) async fn run(g: &Global, cmd: PreviewCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        PreviewCmd::Url {
            computer,
            port,
            expires,
            access,
        } => {
            let route = Route::CreatePreview {
                computer: ComputerId::new(computer),
            };
            let body = CreatePreview {
                port,
                access: Some(access),
                expires_in_secs: Some(expires.as_secs()),
            };
            let p: CreatedPreview = c.call(route.method(), &route.path(), &body).await?;
            if g.json {
                print_json(&p);
            } else {
                eprintln!(
                    "preview {} of port {} ({} access) until {} ms: shown once, keep it now",
                    p.preview.id, p.preview.port, p.preview.access, p.preview.expires_at_ms
                );
                println!("{}", p.url);
            }
        }
        PreviewCmd::List { computer, all } => {
            let route = Route::ListPreviews {
                computer: ComputerId::new(computer),
            };
            let path = if all {
                route.path_with_query([("all", "true")])
            } else {
                route.path()
            };
            let list: PreviewList = c.fetch(route.method(), &path).await?;
            if g.json {
                print_json(&list);
            } else {
                for p in &list.previews {
                    print_preview(p);
                }
            }
        }
        PreviewCmd::Revoke { computer, preview } => {
            let route = Route::RevokePreview {
                computer: ComputerId::new(computer),
                preview,
            };
            let p: Preview = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&p);
            } else {
                println!("revoked {}", p.id);
            }
        }
    }
    Ok(0)
}
