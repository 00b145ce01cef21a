//! `rakazo lease …`: acquire, renew, release and show a bot's execution lease
//! (`/v1/computers/{id}/leases/{bot}…`).

use super::ids;
use super::{print_json, Global};
use crate::route::{ComputerId, Route};
use crate::schema::lease::{Lease, LeaseReleased, LeaseRequest, RunCheckpoint};
use anyhow::Result;
use clap::Subcommand;
use gateway_proto::BotId;

#[derive(Subcommand)]
pub enum LeaseCmd {
    /// Take the bot's execution lease for a run; prints `<owner>:<fence>`.
    Acquire {
        computer: String,
        bot: String,
        /// The run id that owns the lease.
        #[arg(long)]
        owner: String,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Extend a lease the run still holds.
    Renew {
        computer: String,
        bot: String,
        lease: String,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// End the run: release its lease (the last lease out checkpoints the home).
    Release {
        computer: String,
        bot: String,
        lease: String,
        /// How the run ended; `failed` and `cancelled` also tear the bot's desktop down.
        #[arg(long, value_parser = ["success", "failed", "cancelled"])]
        outcome: Option<String>,
    },
    /// The bot's live lease.
    Show { computer: String, bot: String },
}

pub(super) async fn run(g: &Global, cmd: LeaseCmd) -> Result<i32> {
    let c = g.client()?;
    let (computer, bot, action, body): (_, _, fn(ComputerId, BotId) -> Route, _) = match cmd {
        LeaseCmd::Acquire {
            computer,
            bot,
            owner,
            ttl_ms,
        } => {
            let body = LeaseRequest {
                owner: Some(owner),
                ttl_ms,
                ..Default::default()
            };
            let acquire = |computer, bot| Route::AcquireLease { computer, bot };
            (computer, bot, acquire, body)
        }
        LeaseCmd::Renew {
            computer,
            bot,
            lease,
            ttl_ms,
        } => (
            computer,
            bot,
            |computer, bot| Route::RenewLease { computer, bot },
            LeaseRequest {
                lease: Some(lease),
                ttl_ms,
                ..Default::default()
            },
        ),
        LeaseCmd::Release {
            computer,
            bot,
            lease,
            outcome,
        } => (
            computer,
            bot,
            |computer, bot| Route::ReleaseLease { computer, bot },
            LeaseRequest {
                lease: Some(lease),
                outcome,
                ..Default::default()
            },
        ),
        LeaseCmd::Show { computer, bot } => {
            let (computer, bot) = ids(&computer, &bot)?;
            let route = Route::GetLease { computer, bot };
            print_lease(g, &c.fetch(route.method(), &route.path()).await?);
            return Ok(0);
        }
    };
    let (computer, bot) = ids(&computer, &bot)?;
    let route: Route = action(computer, bot);
    if !matches!(route, Route::ReleaseLease { .. }) {
        print_lease(g, &c.call(route.method(), &route.path(), &body).await?);
        return Ok(0);
    }
    let released: LeaseReleased = c.call(route.method(), &route.path(), &body).await?;
    if g.json {
        print_json(&released);
    } else {
        print_released(&released);
    }
    Ok(0)
}

/// `<owner>:<fence>\texpires_at_ms=<ms>`.
fn print_lease(g: &Global, lease: &Lease) {
    if g.json {
        print_json(lease);
    } else {
        println!("{}\texpires_at_ms={}", lease.lease, lease.expires_at_ms);
    }
}

/// `released`, then what the run-end checkpoint did (docs/homes.md#checkpoints): a failure must
/// reach the user, not only the server log; the release itself stands, and the previous revision
/// stays current.
fn print_released(released: &LeaseReleased) {
    println!("released");
    match &released.checkpoint {
        RunCheckpoint::Saved { revision, .. } => println!("home checkpointed: revision {revision}"),
        RunCheckpoint::Failed { error } => eprintln!(
            "rakazo: the home checkpoint after this run failed (the previous revision stays current): {error}"
        ),
        RunCheckpoint::Deferred { .. } => println!("home checkpoint deferred"),
        RunCheckpoint::Skipped { .. } => println!("home checkpoint skipped"),
    }
}
