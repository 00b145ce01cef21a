//! Homes (issue 6, docs/homes.md): checkpoints and restores through the real control plane and
//! guest, to the local store and to a real S3 server (s3s-fs) with sealed objects.
//!
//! Hostile archives (`..`, absolute paths, symlinks, devices and FIFOs, too many entries or
//! bytes) are covered at crate level against the same reader the guest runs:
//! `homes/src/archive/tests.rs` and `homes/tests/store_conformance/`. Here tampered objects are
//! refused before the guest sees a byte, and correctly sealed archives that only a reader with
//! the tree can tell are hostile (an entry before its parent, a duplicate) reach the guest's
//! import, which refuses them.

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::{full_body, q};
use homes::testing::{expected_after_restore, manifest, write_sample_home};
use http_body_util::BodyExt;
use hyper::Method;
use sha2::{Digest, Sha256};
use std::process::Stdio;
use std::time::Duration;
use tests::fixture::Fixture;
use tests::s3::S3Server;
use tests::{wait_for, ObjectStoreOptions, World, WorldOptions};

mod hostile;
mod incremental;
mod local;
mod object_store;

/// Segment size of the sealed format (homes `FORMAT.md`): 64 KiB of plaintext plus a 16-byte tag.
const SEALED_SEGMENT: usize = 65536 + 16;

fn profile_of(bot: &str) -> String {
    format!(
        ".browser-profiles/{}",
        &hex::encode(Sha256::digest(bot.as_bytes()))[..32]
    )
}

/// A world keeping homes in `s3` in the archive format: these tests read, forge and count its
/// objects (`homes/<storage id>/<revision>`). The incremental format's are in `incremental`.
async fn object_world(s3: &S3Server, allow: &[&str]) -> Result<World> {
    World::start_with(WorldOptions {
        object_store: Some(ObjectStoreOptions::for_server(s3)),
        home_format: Some("archive"),
        allow_warn: allow.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
}

async fn home_info(w: &World, c: &str) -> Result<serde_json::Value> {
    Ok(w.client
        .json(Method::GET, &format!("/v1/computers/{c}/home"), None)
        .await?)
}

/// Ends a run successfully; returns what its run-end checkpoint did (the release's answer).
async fn release(w: &World, c: &str, bot: &str, lease: &str) -> Result<serde_json::Value> {
    let v = w
        .post(
            &format!("/v1/computers/{c}/leases/{bot}/release"),
            serde_json::json!({ "lease": lease, "outcome": "success" }),
        )
        .await?;
    Ok(v["checkpoint"].clone())
}

async fn screen(
    w: &World,
    c: &str,
    bot: &str,
    lease: &str,
    action: &str,
    extra: serde_json::Value,
) -> Result<serde_json::Value> {
    let mut body = serde_json::json!({ "lease": lease });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    Ok(
        w.post(&format!("/v1/computers/{c}/screens/{bot}/{action}"), body)
            .await?,
    )
}

async fn open_url(w: &World, c: &str, bot: &str, lease: &str, url: &str) -> Result<()> {
    screen(
        w,
        c,
        bot,
        lease,
        "act",
        serde_json::json!({ "actions": [{ "type": "open", "url": url }] }),
    )
    .await?;
    Ok(())
}

/// The one checkpoint object of the world's bucket.
async fn only_object(s3: &S3Server) -> Result<String> {
    let keys = s3.keys("homes/").await?;
    match keys.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!("expected one checkpoint object, found {other:?}"),
    }
}
