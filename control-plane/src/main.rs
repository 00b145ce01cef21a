//! `rakazo`: parses the command line, sets up logging, and hands over to [`control_plane::cli`].

use clap::Parser;
use control_plane::cli::{self, Cli, Command};

fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("RAKAZO_LOG").unwrap_or_else(|_| {
        let default = if matches!(cli.command, Command::Serve(_)) {
            "info"
        } else {
            "warn"
        };
        tracing_subscriber::EnvFilter::new(default)
    });
    // kube's client logs every 5xx answer at ERROR, without context; the kubernetes provider
    // reports its failures itself, classified (docs/kubernetes.md).
    let filter = match "kube_client::client::builder=off".parse() {
        Ok(d) => filter.add_directive(d),
        Err(_) => filter,
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.global.log_format {
        // One JSON object per line: `timestamp`, `level`, `message`, the event's fields, `target`.
        cli::LogFormat::Json => logs.json().flatten_event(true).init(),
        cli::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    // Before the runtime starts its threads: they allocate in the arenas this bounds.
    let _ = control_plane::heap::configure();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rakazo: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async {
        match cli::run(cli).await {
            Ok(code) => code,
            Err(e) => cli::report(&e),
        }
    });
    std::process::exit(code);
}
