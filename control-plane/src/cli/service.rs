//! `rakazo service …`: services, detached processes a computer starts again each time it starts
//! (docs/api.md#services).

use super::{print_json, Global};
use crate::route::{ComputerId, Route};
use crate::schema::service::{Service, ServiceList, SetService};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum ServiceCmd {
    /// Set a service and start it now (a new command line replaces the old one's process).
    Set {
        computer: String,
        /// 1 to 32 of a-z, 0-9 and -.
        name: String,
        /// Working directory, relative to the home.
        #[arg(long)]
        cwd: Option<String>,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// List the services with their processes.
    List { computer: String },
    /// Remove a service; its process is sent TERM.
    Rm { computer: String, name: String },
}

fn print_service(s: &Service) {
    let state = s.process.as_ref().map_or_else(
        || "-".to_string(),
        |p| format!("{}:{:?}", p.id, p.state).to_lowercase(),
    );
    println!("{}\t{}\t{}", s.name, state, s.argv.join(" "));
}

pub(super) async fn run(g: &Global, cmd: ServiceCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        ServiceCmd::Set {
            computer,
            name,
            cwd,
            argv,
        } => {
            let route = Route::SetService {
                computer: ComputerId::new(computer),
                service: name,
            };
            let s: Service = c
                .call(route.method(), &route.path(), &SetService { argv, cwd })
                .await?;
            if g.json {
                print_json(&s);
            } else {
                print_service(&s);
            }
        }
        ServiceCmd::List { computer } => {
            let route = Route::ListServices {
                computer: ComputerId::new(computer),
            };
            let list: ServiceList = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&list);
            } else {
                for s in &list.services {
                    print_service(s);
                }
            }
        }
        ServiceCmd::Rm { computer, name } => {
            let route = Route::DeleteService {
                computer: ComputerId::new(computer),
                service: name,
            };
            let s: Service = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&s);
            } else {
                println!("removed {}", s.name);
            }
        }
    }
    Ok(0)
}
