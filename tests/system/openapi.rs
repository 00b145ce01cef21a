//! The API's OpenAPI document against the real `rakazo serve`: the document it serves at
//! `GET /v1/openapi.json` (no token) is the committed `control-plane/openapi.json` and what
//! `rakazo openapi` prints; and schemathesis (PyPI, `scripts/schemathesis.sh` installs it outside
//! the checkout) finds nothing wrong with the live server against it: every documented operation
//! is called with generated valid and invalid input, and each answer must be a documented status
//! with a body and content type matching the document, never a 500, and a 401 without the token.
//!
//! The computer and bot in the paths are real (a local computer with its guest connected), so
//! the routes behind `{computer}` run their handlers instead of stopping at 404. Destroying and
//! stopping the computer are checked in a second run after everything else, so they do not turn
//! the rest into `computer_destroyed`.
//!
//! Left out, because they cannot be exercised safely or at all by a generator: the guest
//! tunnel's websocket upgrade (schemathesis sends no upgrade; its refusals are checked, the
//! tunnel itself in `tunnel_tcp`), a checkpoint's wait for leases (`wait_ms` pinned to 0: the run
//! holds leases of its own, and a generated wait would hold the run for minutes).
//!
//! After the operations one at a time, the stateful phase chains them along the document's
//! links (`control-plane/src/api/openapi/links.rs`): what a create answered (a process, a pool,
//! a preview, a service, a secret, a token, a job) is what the next calls show, follow, resize,
//! revoke, kill or delete, so those routes run on real resources instead of stopping at 404.
//! About 2,300 requests one at a time, 2 to 3 minutes on 2 busy cores (5 examples per operation
//! plus the coverage phase's boundary cases), then the stateful phase.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tests::{bin, World};

/// The committed document.
fn committed_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../control-plane/openapi.json")
}

const REGENERATE: &str = "regenerate it with `cargo run -q -p control-plane --bin rakazo -- \
                          openapi > control-plane/openapi.json` and commit it";

#[tokio::test(flavor = "multi_thread")]
async fn the_served_document_is_the_committed_one() -> Result<()> {
    let mut w = World::start().await?;
    let committed = std::fs::read_to_string(committed_path())
        .with_context(|| format!("read {}", committed_path().display()))?;
    // Public, as health is: no token.
    let got = tests::live::get(&w.http, "/v1/openapi.json").await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.header("content-type"), Some("application/json"));
    let served = String::from_utf8(got.body)?;
    assert!(
        served == committed,
        "the served OpenAPI document differs from control-plane/openapi.json: {REGENERATE}"
    );
    let doc: serde_json::Value = serde_json::from_str(&served)?;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The CLI prints the same bytes, without a server.
    let out = Command::new(bin("rakazo")).arg("openapi").output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == committed.as_bytes(),
        "`rakazo openapi` differs from control-plane/openapi.json: {REGENERATE}"
    );
    w.check_log()
}

/// The schemathesis executable, installed by `scripts/schemathesis.sh install`.
fn schemathesis() -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/schemathesis.sh");
    let out = Command::new("bash").arg(&script).arg("install").status()?;
    if !out.success() {
        bail!("scripts/schemathesis.sh install failed");
    }
    let out = Command::new("bash").arg(&script).arg("path").output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// schemathesis's configuration: the token comes from the environment (never argv), the path
/// parameters name the real computer and a bot, and the checks are the conformance ones.
fn config(computer: &str) -> String {
    format!(
        r#"# Written by tests/system/openapi.rs.
seed = 1
max-failures = 20
request-timeout = 20
# One worker: hypothesis's lambda descriptions race in CPython's AST parser across threads
# ("AST constructor recursion depth mismatch"), a runtime error of the tester, not the server.
workers = 1
# Conformance (status, content type, headers, body against the document), no server errors,
# refusal of input the document rules out, and 401 without the token.
[checks]
enabled = false
not_a_server_error.enabled = true
status_code_conformance.enabled = true
content_type_conformance.enabled = true
response_headers_conformance.enabled = true
response_schema_conformance.enabled = true
negative_data_rejection.enabled = true
ignored_auth.enabled = true

[auth.openapi.bearer]
bearer = "${{RAKAZO_ST_TOKEN}}"

[parameters]
"path.computer" = "{computer}"
"path.bot" = "st-bot"

[generation]
max-examples = 5

# The stateful phase follows the document's links (`api/openapi/links.rs`) only: a process,
# pool, preview, service, secret, token or job it created is then shown, followed, killed,
# resized, revoked or deleted by the id its answer gave.
[phases.stateful]
enabled = true
max-steps = 10
inference.algorithms = []
[phases.stateful.generation]
max-examples = 60

# A checkpoint waits up to wait_ms for bots' leases to end, and the run holds leases of its
# own: do not let it wait (the bound itself is still checked by its negative cases).
[[operations]]
include-operation-id = "home.checkpoint"
parameters = {{ "query.wait_ms" = 0 }}
"#
    )
}

/// Runs schemathesis on the operations `filter` selects; fails with its report if it found
/// anything.
fn run(st: &Path, dir: &Path, w: &World, filter: &[&str]) -> Result<()> {
    let doc = dir.join("openapi.json");
    let mut cmd = Command::new(st);
    cmd.arg("--config-file")
        .arg(dir.join("schemathesis.toml"))
        .arg("--no-color")
        .arg("run")
        .arg(&doc)
        .arg("--url")
        .arg(&w.http)
        .args(filter)
        .current_dir(dir)
        .env("RAKAZO_ST_TOKEN", w.api_token())
        .env("NO_COLOR", "1");
    let out = run_bounded(cmd, Duration::from_secs(600))?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    if !out.status.success() {
        bail!("schemathesis found problems (its report is above)");
    }
    Ok(())
}

/// Runs `cmd`, killing it past `limit`.
fn run_bounded(mut cmd: Command, limit: Duration) -> Result<std::process::Output> {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("run schemathesis")?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Ok(out?),
        Err(_) => {
            tests::term_then_kill(&[pid as i32], Duration::from_secs(2));
            bail!("schemathesis ran longer than {limit:?}")
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_nothing_against_the_live_server() -> Result<()> {
    let st = schemathesis()?;
    let mut w = World::start().await?;
    // Generated checkpoints meet the run's own leases (a takeover's control lease too) and
    // give up at once (wait_ms 0), as they should: that is logged as a warning.
    w.allow_warn("home checkpoint failed; the previous revision stays current");
    // Generated starts, stops and destroys rotate or retire computers' enrollment tokens while
    // the old machine's guest may still be dialling: it is refused, as it must be.
    w.allow_warn("reason=bad credentials");
    let computer = w.create_computer("openapi").await?;
    // The guest is up: the routes behind the computer reach it.
    assert_eq!(w.sh(&computer, "echo up").await?.trim(), "up");
    let dir = tempfile::tempdir()?;
    std::fs::copy(committed_path(), dir.path().join("openapi.json"))?;
    std::fs::write(dir.path().join("schemathesis.toml"), config(&computer))?;
    // Everything but the operations that end the computer, then those.
    let enders = [
        "--exclude-operation-id",
        "computer.destroy",
        "--exclude-operation-id",
        "computer.stop",
    ];
    run(&st, dir.path(), &w, &enders)?;
    // No link leads to them alone: one at a time only.
    let only = [
        "--include-operation-id",
        "computer.stop",
        "--include-operation-id",
        "computer.destroy",
        "--phases",
        "coverage,fuzzing",
    ];
    run(&st, dir.path(), &w, &only)?;
    // The token never reached the server's log in a URL or elsewhere.
    assert!(!w.log().contains(w.api_token()));
    w.check_log()
}

/// Found by schemathesis: a JSON array where a route takes an object was accepted (serde reads a
/// struct from an array of its fields in order), and takeover and release-control ignored their
/// body altogether. Each is now a 400.
#[tokio::test(flavor = "multi_thread")]
async fn bodies_that_are_not_the_documented_object_are_refused() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("shapes").await?;
    let screens = format!("/v1/computers/{c}/screens/bot-1");
    let cases = [
        (format!("{screens}/url"), serde_json::json!([null, null])),
        (
            format!("/v1/computers/{c}/terminals/bot-1/url"),
            serde_json::json!([]),
        ),
        (
            format!("{screens}/takeover"),
            serde_json::json!([null, null]),
        ),
        (format!("{screens}/takeover"), serde_json::json!({ "x": 1 })),
        (format!("{screens}/release-control"), serde_json::json!([])),
        (
            format!("{screens}/release-control"),
            serde_json::json!({ "x": 1 }),
        ),
        (
            format!("/v1/computers/{c}/leases/bot-1/acquire"),
            serde_json::json!(["run-1"]),
        ),
        (format!("{screens}/act"), serde_json::json!(["run-1:1", []])),
        ("/v1/computers".to_string(), serde_json::json!(["acme"])),
    ];
    for (path, body) in cases {
        match w.post(&path, body.clone()).await {
            Err(control_plane::client::ClientError::Api { status, code, .. }) => {
                assert_eq!(
                    (status.as_u16(), code.as_str()),
                    (400, "bad_request"),
                    "{path} {body}"
                )
            }
            other => bail!("{path} {body}: {other:?}"),
        }
    }
    // The documented bodies still work, an empty one too where the body is optional.
    w.post(&format!("{screens}/takeover"), serde_json::json!({}))
        .await?;
    w.post(&format!("{screens}/release-control"), serde_json::json!({}))
        .await?;
    let empty = control_plane::client::full_body(bytes::Bytes::new());
    let url = w
        .client
        .send(
            hyper::Method::POST,
            &format!("{screens}/url"),
            None,
            Some(0),
            empty,
        )
        .await;
    assert!(url.is_ok(), "{url:?}");
    w.check_log()
}
