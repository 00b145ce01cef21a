//! The guest ships as one statically linked binary, and that binary works end to end.

use anyhow::Result;
use tests::{static_guest, World, WorldOptions};

#[tokio::test]
async fn the_static_guest_is_statically_linked_and_serves_a_computer() -> Result<()> {
    let guest = static_guest();
    let out = std::process::Command::new("file")
        .arg("-L")
        .arg(&guest)
        .output()?;
    let desc = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        desc.contains("statically linked") || desc.contains("static-pie linked"),
        "not static: {desc}"
    );
    assert!(
        !desc.contains("interpreter"),
        "has a dynamic loader: {desc}"
    );
    let mut w = World::start_with(WorldOptions {
        guest_bin: Some(guest),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-static").await?;
    let r = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", "echo static guest; id -un"] }),
        )
        .await?;
    assert!(
        r.stdout.starts_with(b"static guest\n"),
        "{:?}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert_eq!(r.code, Some(0));
    // A program found in PATH starts by its path (posix_spawn, musl's here) in the cwd asked
    // for, under the name it was asked by.
    let made = w
        .exec(&c, serde_json::json!({ "argv": ["mkdir", "sub"] }))
        .await?;
    assert_eq!(made.code, Some(0));
    let r = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", "echo $0; pwd"], "cwd": "sub" }),
        )
        .await?;
    assert_eq!(r.code, Some(0));
    let home = std::fs::canonicalize(w.home_of(&c))?;
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        format!("sh\n{}\n", home.join("sub").display())
    );
    w.check_log()
}
