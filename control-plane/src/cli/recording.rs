//! `rakazo recording …`: screen recordings (docs/recordings.md). `on`/`off` choose whether a
//! computer's screens are recorded; `list` shows what was recorded; `get` writes a bot's raw
//! records; `export` turns them into a WebM or MP4 video with ffmpeg (which must be installed
//! where the CLI runs: the server never encodes video).

use super::{print_json, Global};
use crate::client::{full_body, Client};
use crate::recordings::video::Replay;
use crate::route::{ComputerId, Route};
use crate::schema::recording::{RecordingList, RecordingSetting, SetRecording};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::Subcommand;
use gateway_proto::BotId;
use http_body_util::BodyExt;
use hyper::Method;
use std::io::Write;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum RecordingCmd {
    /// Record the computer's screens from now on: frames and inputs (the bots', and a person's
    /// under takeover; typed text only as a count). With --workspace: the default of the
    /// workspace's computers that have no setting of their own.
    On(Target),
    /// Stop recording (what was recorded is kept for the server's retention); with
    /// --workspace, the workspace's default.
    Off(Target),
    /// Whether the computer is recorded, and what was recorded of each bot.
    List { computer: String },
    /// Write a bot's recording, raw (the record format), to a file or standard output.
    Get {
        computer: String,
        #[command(flatten)]
        range: Range,
        /// Where to write (default: standard output).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Export a bot's recording as a video: WebM (VP8) or MP4 (H.264) by the output's
    /// extension, encoded by ffmpeg.
    Export {
        computer: String,
        #[command(flatten)]
        range: Range,
        /// The video file: `….webm` or `….mp4`.
        #[arg(short, long)]
        output: PathBuf,
        /// Frames per second of the video.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=30))]
        fps: u32,
    },
}

#[derive(clap::Args)]
pub struct Target {
    #[arg(required_unless_present = "workspace")]
    computer: Option<String>,
    /// A workspace instead of a computer (an admin's).
    #[arg(long, conflicts_with = "computer")]
    workspace: Option<String>,
}

#[derive(clap::Args)]
pub struct Range {
    /// The bot (default: the only bot recorded).
    #[arg(long)]
    bot: Option<String>,
    /// From this long ago (`10m`, `2h`) or this time (ms since 1970).
    #[arg(long)]
    since: Option<String>,
    /// Up to this long ago or this time (ms since 1970).
    #[arg(long)]
    until: Option<String>,
}

/// A time flag: a duration ago, or ms since 1970.
fn time_of(flag: &str, v: &str) -> Result<i64> {
    if let Ok(ms) = v.parse::<i64>() {
        return Ok(ms);
    }
    let ago = crate::tokens::parse_duration(v).map_err(|e| anyhow!("--{flag}: {e}"))?;
    Ok(crate::clock::now_ms() - i64::try_from(ago.as_millis()).unwrap_or(i64::MAX))
}

async fn list(c: &Client, computer: &str) -> Result<RecordingList> {
    let route = Route::ListRecordings {
        computer: ComputerId::new(computer),
    };
    Ok(c.fetch(route.method(), &route.path()).await?)
}

/// The raw records of the range's bot.
async fn records(c: &Client, computer: &str, range: &Range) -> Result<Vec<u8>> {
    let bot = match &range.bot {
        Some(b) => b.clone(),
        None => {
            let l = list(c, computer).await?;
            match l.bots.as_slice() {
                [one] => one.bot.clone(),
                [] => bail!("nothing was recorded on {computer}"),
                many => bail!(
                    "several bots were recorded ({}): name one with --bot",
                    many.iter()
                        .map(|b| b.bot.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    let bot = BotId::new(&bot).map_err(|e| anyhow!("--bot: {e}"))?;
    let since = range
        .since
        .as_deref()
        .map(|v| time_of("since", v))
        .transpose()?;
    let until = range
        .until
        .as_deref()
        .map(|v| time_of("until", v))
        .transpose()?;
    let (since, until) = (since.map(|v| v.to_string()), until.map(|v| v.to_string()));
    let mut query = Vec::new();
    query.extend(since.as_deref().map(|v| ("since", v)));
    query.extend(until.as_deref().map(|v| ("until", v)));
    let url = Route::ReadRecording {
        computer: ComputerId::new(computer),
        bot,
    }
    .path_with_query(query);
    let resp = c
        .send(Method::GET, &url, None, None, full_body(Bytes::new()))
        .await?;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| anyhow!("the download broke: {e}"))?;
    Ok(body.to_bytes().to_vec())
}

/// ffmpeg's arguments for `output`, by its extension.
fn encoder(output: &std::path::Path) -> Result<&'static [&'static str]> {
    match output.extension().and_then(|e| e.to_str()) {
        Some("webm") => Ok(&[
            "-c:v",
            "libvpx",
            "-deadline",
            "realtime",
            "-cpu-used",
            "8",
            "-b:v",
            "2M",
        ]),
        Some("mp4") => Ok(&[
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+faststart",
        ]),
        _ => bail!("the output must end in .webm or .mp4"),
    }
}

/// Encodes `replay` into `output` with ffmpeg.
fn export(replay: &Replay, fps: u32, output: &std::path::Path) -> Result<()> {
    let codec = encoder(output)?;
    let size = format!("{}x{}", replay.width, replay.height);
    let mut child = std::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y"])
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", &size])
        .args(["-r", &fps.to_string(), "-i", "-"])
        .args(codec)
        .arg(output)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("cannot run ffmpeg (install it: apt-get install ffmpeg)")?;
    let mut stdin = child.stdin.take().expect("piped");
    let fed = replay.frames(fps, |f| stdin.write_all(f));
    drop(stdin);
    let status = child.wait()?;
    fed.context("ffmpeg stopped taking frames")?;
    if !status.success() {
        bail!("ffmpeg failed ({status})");
    }
    Ok(())
}

fn print_setting(s: &RecordingSetting) {
    let by = match (&s.set_by, s.set_at_ms) {
        (Some(by), Some(at)) => format!(" (set by {by} at {at} ms)"),
        _ => String::new(),
    };
    let on = if s.enabled { "on" } else { "off" };
    let from = match s.source.as_str() {
        "workspace" => " by the workspace's default",
        "default" => " (never set)",
        _ => "",
    };
    println!("recording {on}{from}{by}; kept {} h", s.retention_hours);
}

pub(super) async fn run(g: &Global, cmd: RecordingCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        RecordingCmd::On(t) => set(g, &c, &t, true).await?,
        RecordingCmd::Off(t) => set(g, &c, &t, false).await?,
        RecordingCmd::List { computer } => {
            let l = list(&c, &computer).await?;
            if g.json {
                print_json(&l);
            } else {
                print_setting(&l.setting);
                for b in &l.bots {
                    let secs = (b.ended_at_ms - b.started_at_ms) as f64 / 1000.0;
                    println!(
                        "{}\t{} ms\t{secs:.1} s\t{} bytes\t{} pieces{}",
                        b.bot,
                        b.started_at_ms,
                        b.bytes,
                        b.pieces,
                        if b.lost > 0 {
                            format!("\t{} records lost", b.lost)
                        } else {
                            String::new()
                        }
                    );
                }
            }
        }
        RecordingCmd::Get {
            computer,
            range,
            output,
        } => {
            let bytes = records(&c, &computer, &range).await?;
            match output {
                Some(path) => {
                    std::fs::write(&path, &bytes)
                        .with_context(|| format!("writing {}", path.display()))?;
                    eprintln!("wrote {} bytes to {}", bytes.len(), path.display());
                }
                None => std::io::stdout().lock().write_all(&bytes)?,
            }
        }
        RecordingCmd::Export {
            computer,
            range,
            output,
            fps,
        } => {
            encoder(&output)?;
            let bytes = records(&c, &computer, &range).await?;
            let replay = Replay::decode(&bytes)?;
            let frames = replay.frame_count(fps);
            let out = output.clone();
            tokio::task::spawn_blocking(move || export(&replay, fps, &out)).await??;
            eprintln!("wrote {} ({frames} frames at {fps} fps)", output.display());
        }
    }
    Ok(0)
}

async fn set(g: &Global, c: &Client, target: &Target, enabled: bool) -> Result<()> {
    let route = match (&target.computer, &target.workspace) {
        (_, Some(ws)) => Route::SetWorkspaceRecording {
            workspace: crate::route::WorkspaceId::new(ws),
        },
        (Some(computer), None) => Route::SetRecording {
            computer: ComputerId::new(computer),
        },
        (None, None) => bail!("name a computer or --workspace"),
    };
    let s: RecordingSetting = c
        .call(route.method(), &route.path(), &SetRecording { enabled })
        .await?;
    if g.json {
        print_json(&s);
    } else {
        print_setting(&s);
    }
    Ok(())
}
