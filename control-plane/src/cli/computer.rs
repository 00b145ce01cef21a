//! `rakazo computer …`: create, list, show, start, stop and destroy computers
//! (`/v1/computers`), and their maintenance jobs: update, recover, jobs, release-interrupted
//! (`/v1/computers/{id}/update|recover|jobs`, `/v1/jobs/{id}`).

use super::{print_json, Global};
use crate::client::Client;
use crate::route::{ComputerId, JobId, Route};
use crate::schema::computer::{Computer, ComputerList, CreateComputer, ForkComputer};
use crate::schema::job::{Job, JobList, ReleaseInterrupted};
use crate::schema::wire_name;
use anyhow::Result;
use clap::Subcommand;
use serde::Serialize;

#[derive(Subcommand)]
pub enum ComputerCmd {
    /// Create a Team computer for a workspace or a Private computer for one bot.
    Create {
        #[arg(
            long,
            conflicts_with = "private_bot",
            required_unless_present = "private_bot"
        )]
        workspace: Option<String>,
        #[arg(long)]
        private_bot: Option<String>,
        /// The provider to run it on (local, docker, …; default: the server's default).
        #[arg(long)]
        provider: Option<String>,
        /// Memory limit of its machine, MiB.
        #[arg(long)]
        memory_mb: Option<u64>,
        /// CPU limit, in thousandths of a CPU (1500 = 1.5 CPUs).
        #[arg(long)]
        cpu_millis: Option<u32>,
        /// Process limit.
        #[arg(long)]
        pids: Option<u32>,
        /// Size of /dev/shm, MiB.
        #[arg(long)]
        shm_mb: Option<u64>,
        /// Where its machines go: a docker engine's name (`--docker-engine NAME=…`), a Daytona
        /// region (default: the provider's choice, for docker the engine with the fewest
        /// computers).
        #[arg(long, value_name = "NAME")]
        placement: Option<String>,
        /// Take it from this warm pool (docs/pools.md): a ready member at once, the stored home
        /// of a returning workspace or bot imported first; none ready, it boots cold on the
        /// pool's provider. Excludes --provider, the limits and --placement.
        #[arg(long, value_name = "NAME", conflicts_with_all = ["provider", "placement", "memory_mb", "cpu_millis", "pids", "shm_mb"])]
        pool: Option<String>,
    },
    /// A new computer (team or private) whose home starts from a revision of this one's:
    /// its latest by default, after a checkpoint if it runs. Bots' browser profiles come
    /// along, signed-in sessions included.
    Fork {
        id: String,
        #[arg(
            long,
            conflicts_with = "private_bot",
            required_unless_present = "private_bot"
        )]
        workspace: Option<String>,
        #[arg(long)]
        private_bot: Option<String>,
        /// The revision of its home to start from (`rakazo home revisions`).
        #[arg(long)]
        revision: Option<u64>,
        #[arg(long)]
        provider: Option<String>,
    },
    List,
    Show {
        id: String,
    },
    /// Show or set the computer's network policy (what it may reach through the egress gateway).
    #[command(subcommand)]
    Network(super::network::NetworkCmd),
    /// Start a stopped computer (or replace a gone machine).
    Start {
        id: String,
    },
    Stop {
        id: String,
    },
    /// Destroy a computer (idempotent).
    Destroy {
        id: String,
    },
    /// Rebuild the computer's machine with the configured provider and image: checkpoint its
    /// live home (after runs holding leases end), replace the machine, restore the home. Runs
    /// as a background job that reserves the computer.
    Update {
        id: String,
        /// Follow the job's stages until it ends; exit 0 only if it succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// Rebuild the computer's machine from its last saved home, without a checkpoint: work
    /// since that checkpoint is lost. For a computer whose machine or guest is broken, or
    /// after an interrupted job was released.
    Recover {
        id: String,
        /// Follow the job's stages until it ends; exit 0 only if it succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// The computer's maintenance jobs, newest first (or one job, with --job).
    Jobs {
        id: String,
        /// Show this job only.
        #[arg(long)]
        job: Option<String>,
    },
    /// Free a computer held by an interrupted job (its worker stopped heartbeating), after
    /// making sure its workers and provider operations have stopped.
    ReleaseInterrupted {
        /// The interrupted job's id.
        job: String,
        /// Assert that the job's workers and provider operations have stopped (required).
        #[arg(long)]
        workers_stopped: bool,
    },
}

fn print_computer(c: &Computer) {
    let owner = c
        .workspace
        .as_ref()
        .map(|w| format!("workspace {w}"))
        .or_else(|| c.bot.as_ref().map(|b| format!("bot {b}")))
        .unwrap_or_default();
    println!(
        "{}\t{}\t{}\t{}\t{}",
        c.id,
        wire_name(&c.kind),
        owner,
        wire_name(&c.state),
        if c.connected {
            "connected"
        } else {
            "disconnected"
        },
    );
    if let Some(p) = &c.placement {
        println!("\tplacement {p}");
    }
    if let Some(m) = &c.machine {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        println!(
            "\tup {}\tload {:.2} {:.2} {:.2} on {} CPUs\thome {:.1} GiB free of {:.1} GiB",
            uptime(m.uptime_secs),
            m.load[0],
            m.load[1],
            m.load[2],
            m.cpus,
            gib(m.home_free_bytes),
            gib(m.home_total_bytes),
        );
        for line in machine_lines(m) {
            println!("\t{line}");
        }
        for p in &m.processes {
            println!("\tprocess {}", super::process::process_line(p));
        }
    }
}

/// The lines under the first machine line: memory, the home's own use, desktops.
fn machine_lines(m: &crate::schema::computer::Machine) -> [String; 3] {
    let limit = if m.memory_limited {
        " (its container's limit)"
    } else {
        ""
    };
    let partial = if m.home_used_partial {
        " (at least: too many files to count them all)"
    } else {
        ""
    };
    [
        format!(
            "memory   {} available of {}{limit}",
            size(m.memory_available_bytes),
            size(m.memory_total_bytes)
        ),
        format!("home use {} in its files{partial}", size(m.home_used_bytes)),
        format!("desktops {} live", m.desktops),
    ]
}

/// `512 B`, `3.0 KiB`, `12.5 MiB`, `1.2 GiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `3d 4h`, `4h 12m`, `12m`.
fn uptime(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60);
    match (d, h) {
        (0, 0) => format!("{m}m"),
        (0, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// What `computer destroy --json` prints (the API answers 204 without a body).
#[derive(Serialize)]
struct Destroyed {
    destroyed: String,
}

pub(super) async fn run(g: &Global, cmd: ComputerCmd) -> Result<i32> {
    let c = g.client()?;
    let computer: Computer = match cmd {
        ComputerCmd::Network(cmd) => return super::network::run(g, cmd).await,
        ComputerCmd::Update { id, wait } => {
            let route = Route::UpdateComputer {
                computer: ComputerId::new(id),
            };
            return start_job(g, route, wait).await;
        }
        ComputerCmd::Recover { id, wait } => {
            let route = Route::RecoverComputer {
                computer: ComputerId::new(id),
            };
            return start_job(g, route, wait).await;
        }
        ComputerCmd::Jobs { id, job } => {
            let jobs = match job {
                Some(j) => vec![fetch(&c, Route::GetJob { job: JobId::new(j) }).await?],
                None => {
                    let list: JobList = fetch(
                        &c,
                        Route::ListJobs {
                            computer: ComputerId::new(id),
                        },
                    )
                    .await?;
                    list.jobs
                }
            };
            if g.json {
                print_json(&JobList { jobs });
            } else {
                jobs.iter().for_each(print_job);
            }
            return Ok(0);
        }
        ComputerCmd::ReleaseInterrupted {
            job,
            workers_stopped,
        } => {
            let route = Route::ReleaseInterrupted {
                job: JobId::new(job),
            };
            let released: Job = c
                .call(
                    route.method(),
                    &route.path(),
                    &ReleaseInterrupted { workers_stopped },
                )
                .await?;
            if g.json {
                print_json(&released);
            } else {
                print_job(&released);
                println!(
                    "computer {} is free: `rakazo computer recover {}` rebuilds it from its last \
                     saved home",
                    released.computer, released.computer
                );
            }
            return Ok(0);
        }
        ComputerCmd::Create {
            workspace,
            private_bot,
            provider,
            memory_mb,
            cpu_millis,
            pids,
            shm_mb,
            placement,
            pool,
        } => {
            let body = CreateComputer {
                pool,
                workspace,
                private_bot,
                provider,
                limits: providers::MachineLimits {
                    memory_mb,
                    cpu_millis,
                    pids,
                    shm_mb,
                },
                placement,
            };
            let route = Route::CreateComputer {};
            c.call(route.method(), &route.path(), &body).await?
        }
        ComputerCmd::Fork {
            id,
            workspace,
            private_bot,
            revision,
            provider,
        } => {
            let body = ForkComputer {
                workspace,
                private_bot,
                revision,
                provider,
                ..Default::default()
            };
            let route = Route::ForkComputer {
                computer: ComputerId::new(id),
            };
            c.call(route.method(), &route.path(), &body).await?
        }
        ComputerCmd::List => {
            let list: ComputerList = fetch(&c, Route::ListComputers {}).await?;
            if g.json {
                print_json(&list);
            } else {
                list.computers.iter().for_each(print_computer);
            }
            return Ok(0);
        }
        ComputerCmd::Show { id } => {
            let computer = ComputerId::new(id);
            fetch(&c, Route::GetComputer { computer }).await?
        }
        ComputerCmd::Start { id } => {
            let computer = ComputerId::new(id);
            fetch(&c, Route::StartComputer { computer }).await?
        }
        ComputerCmd::Stop { id } => {
            let computer = ComputerId::new(id);
            fetch(&c, Route::StopComputer { computer }).await?
        }
        ComputerCmd::Destroy { id } => {
            let computer = ComputerId::new(id.clone());
            fetch::<()>(&c, Route::DestroyComputer { computer }).await?;
            if g.json {
                print_json(&Destroyed { destroyed: id });
            } else {
                println!("destroyed {id}");
            }
            return Ok(0);
        }
    };
    if g.json {
        print_json(&computer)
    } else {
        print_computer(&computer)
    }
    Ok(0)
}

/// One line per job, then its warning and error if any.
fn print_job(j: &Job) {
    println!(
        "{}\t{}\t{}\t{}\tstage {}{}",
        j.id,
        j.computer,
        j.kind,
        j.state,
        j.stage,
        j.revision
            .map(|r| format!("\thome revision {r}"))
            .unwrap_or_default()
    );
    if let Some(w) = &j.warning {
        println!("\twarning: {w}");
    }
    if let Some(e) = &j.error {
        println!("\terror: {e}");
    }
}

/// A route's answer, the route taking no body.
async fn fetch<R: serde::de::DeserializeOwned>(c: &Client, route: Route) -> Result<R> {
    Ok(c.fetch(route.method(), &route.path()).await?)
}

/// How often `--wait` looks at the job.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// `computer update|recover`: starts the job; with `wait`, prints each stage as the job reaches
/// it (from its stored history, so none is missed) until it ends.
async fn start_job(g: &Global, route: Route, wait: bool) -> Result<i32> {
    let c = g.client()?;
    let mut job: Job = fetch(&c, route).await?;
    if !g.json {
        println!("job {} {} computer {}", job.id, job.kind, job.computer);
        if let Some(w) = &job.warning {
            println!("warning: {w}");
        }
    }
    if !wait {
        if g.json {
            print_json(&job);
        } else {
            println!("{}\tstage {}", job.state, job.stage);
        }
        return Ok(0);
    }
    let mut shown = 0;
    loop {
        if !g.json {
            for s in job.stages.iter().skip(shown) {
                println!("stage {}", s.stage);
            }
        }
        shown = job.stages.len();
        if !matches!(job.state.as_str(), "queued" | "running") {
            break;
        }
        tokio::time::sleep(WAIT_POLL).await;
        job = fetch(
            &c,
            Route::GetJob {
                job: JobId::new(job.id),
            },
        )
        .await?;
    }
    if g.json {
        print_json(&job);
    } else {
        println!("{}", job.state);
        if let Some(e) = &job.error {
            eprintln!("rakazo: job {} {}: {e}", job.id, job.state);
        }
    }
    Ok(if job.state == "succeeded" { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::computer::Machine;

    #[test]
    fn the_machine_lines_say_what_each_figure_is() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 << 10), "3.0 KiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
        assert_eq!(size(3 << 29), "1.5 GiB");
        let m = Machine {
            uptime_secs: 60,
            load: [0.0; 3],
            cpus: 2,
            home_total_bytes: 1 << 40,
            home_free_bytes: 1 << 39,
            memory_total_bytes: 1 << 30,
            memory_available_bytes: 1 << 29,
            memory_limited: true,
            home_used_bytes: 3 << 20,
            home_used_partial: true,
            desktops: 2,
            processes: Vec::new(),
        };
        assert_eq!(
            machine_lines(&m),
            [
                "memory   512.0 MiB available of 1.0 GiB (its container's limit)".to_string(),
                "home use 3.0 MiB in its files (at least: too many files to count them all)"
                    .to_string(),
                "desktops 2 live".to_string(),
            ]
        );
    }
}
