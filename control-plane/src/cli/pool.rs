//! `rakazo pool …`: warm pools (docs/pools.md). `rakazo computer create --pool NAME` takes a
//! computer from one.

use super::{print_json, Global};
use crate::route::Route;
use crate::schema::pool::{CreatePool, Pool, PoolDeleted, PoolList, ResizePool};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Keep SIZE computers booted on a provider, unassigned (an admin's): `computer create
    /// --pool NAME` hands one out at once; the pool refills in the background.
    Create {
        name: String,
        /// The provider its members run on (default: the server's default).
        #[arg(long)]
        provider: Option<String>,
        /// How many unassigned members it keeps booted (0..=64).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64))]
        size: u32,
        /// Each member with a desktop and Chrome already up, which the first bot to ask for
        /// a screen takes.
        #[arg(long)]
        desktop: bool,
        /// Memory limit of its members' machines, MiB.
        #[arg(long)]
        memory_mb: Option<u64>,
        /// CPU limit, in thousandths of a CPU.
        #[arg(long)]
        cpu_millis: Option<u32>,
    },
    /// The pools and their members.
    List,
    /// One pool and its members.
    Show { name: String },
    /// Change a pool's size.
    Resize {
        name: String,
        #[arg(value_parser = clap::value_parser!(u32).range(0..=64))]
        size: u32,
    },
    /// Delete a pool and destroy its unassigned members.
    Delete { name: String },
}

fn print_pool(p: &Pool) {
    println!(
        "{}\tprovider={}\tsize={}\tready={}\tdesktop={}",
        p.name, p.provider, p.size, p.ready, p.desktop
    );
    for m in &p.members {
        println!(
            "  {}\t{}{}",
            m.id,
            m.state,
            if m.ready { "\tready" } else { "" }
        );
    }
}

pub(super) async fn run(g: &Global, cmd: PoolCmd) -> Result<i32> {
    let c = g.client()?;
    let shown: Pool = match cmd {
        PoolCmd::Create {
            name,
            provider,
            size,
            desktop,
            memory_mb,
            cpu_millis,
        } => {
            let route = Route::CreatePool {};
            let body = CreatePool {
                name,
                provider,
                size,
                desktop,
                limits: providers::MachineLimits {
                    memory_mb,
                    cpu_millis,
                    ..Default::default()
                },
            };
            c.call(route.method(), &route.path(), &body).await?
        }
        PoolCmd::List => {
            let route = Route::ListPools {};
            let list: PoolList = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&list);
            } else if list.pools.is_empty() {
                println!("no pools");
            } else {
                list.pools.iter().for_each(print_pool);
            }
            return Ok(0);
        }
        PoolCmd::Show { name } => {
            let route = Route::GetPool { pool: name };
            c.fetch(route.method(), &route.path()).await?
        }
        PoolCmd::Resize { name, size } => {
            let route = Route::ResizePool { pool: name };
            c.call(route.method(), &route.path(), &ResizePool { size })
                .await?
        }
        PoolCmd::Delete { name } => {
            let route = Route::DeletePool { pool: name };
            let done: PoolDeleted = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&done);
            } else {
                println!(
                    "pool {} deleted ({} unassigned members destroyed)",
                    done.name, done.destroyed
                );
            }
            return Ok(0);
        }
    };
    if g.json {
        print_json(&shown);
    } else {
        print_pool(&shown);
    }
    Ok(0)
}
