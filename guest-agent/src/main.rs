//! `rakazo-guest`: reads its configuration from the environment, drops root for good when
//! `RAKAZO_RUN_AS` says so, then keeps the tunnel up.

use guest_agent::config::{Config, Env};
use guest_agent::home::Home;
use guest_agent::ops::Ops;
use guest_agent::screens::{Screens, ScreensConfig};
use std::sync::Arc;

fn main() {
    let filter = Env::log_filter().unwrap_or_else(|| "info".to_string());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    if Env::log_json() {
        logs.json().flatten_event(true).init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let config = match Config::from_source(&Env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rakazo-guest: {e}");
            std::process::exit(2);
        }
    };
    // Before anything starts: no RAKAZO_* variable is left to inherit, and from here on nothing
    // runs as root (the token file, root's, has been read above).
    Env::settle(config.run_as.as_ref(), &config.home);
    // The token is in memory now; the file goes before any command can run (a root guest
    // removes root's file before dropping; a restart gets a fresh token and file anyway).
    if let Some(path) = &config.token_file {
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                // A read-only secret mount, say: the token stays readable only to its owner.
                tracing::warn!(path = %path.display(), error = %e, "cannot remove the token file");
            }
        }
    }
    if config.run_as.is_none() {
        if let Err(e) = guest_agent::privilege::make_private() {
            eprintln!("rakazo-guest: {e}");
            std::process::exit(2);
        }
    }
    if let Some(run_as) = &config.run_as {
        if let Err(e) = guest_agent::privilege::drop_to(run_as, &config.home) {
            eprintln!("rakazo-guest: {e}");
            std::process::exit(2);
        }
        tracing::info!(
            uid = run_as.uid,
            gid = run_as.gid,
            user = run_as.user_name(),
            "running as"
        );
    }
    let home = match Home::new(&config.home) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("rakazo-guest: home {}: {e}", config.home.display());
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rakazo-guest: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = guest_agent::config::ensure_private_dir(&config.runtime_dir) {
        eprintln!("rakazo-guest: {e}");
        std::process::exit(2);
    }
    // Before any display starts: a SIGKILLed predecessor's Xvnc would hold its display number.
    guest_agent::orphans::reap(&config.runtime_dir, &config.home);
    let screens = Arc::new(
        Screens::new(
            ScreensConfig {
                home: config.home.clone(),
                runtime_dir: config.runtime_dir.clone(),
                limit: config.screen_limit,
                chromium: config.chromium.clone(),
                device_scale: config.browser_scale,
            },
            guest_agent::clock::monotonic(),
        )
        .with_browser_provider(config.browser_provider),
    );
    let mut gateway =
        guest_agent::gateway::GatewayConfig::new(config.runtime_dir.clone(), config.home.clone());
    gateway.workspace_user = config.workspace_user;
    gateway.terminal_grace = config.terminal_grace;
    let procs = guest_agent::procs::ProcConfig {
        log_bytes: config.process_log_bytes,
        ..Default::default()
    };
    let ops = Arc::new(Ops::with_gateway(home, screens.clone(), gateway).with_processes(procs));
    runtime.block_on(async move {
        tokio::select! {
            r = guest_agent::tunnel::run(config, ops) => {
                if let Err(e) = r {
                    eprintln!("rakazo-guest: {e:#}");
                    std::process::exit(1);
                }
            }
            () = terminate() => {
                // Desktops are torn down properly, so every browser flushes its profile.
                tracing::info!("terminating: releasing desktops");
                screens.shutdown().await;
            }
        }
    });
    // Dropping the runtime cancels every operation; exec's guards kill their process trees.
    drop(runtime);
}

/// Resolves on SIGTERM or SIGINT.
async fn terminate() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
