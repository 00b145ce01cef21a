//! The stalled guest of the system tests: `rogue_guest` (tests/src/bin) stands in for the real
//! guest of the computers told to stall. It says hello, answers pings and then never answers an
//! operation (a home export gets its first frame and a few archive bytes). Every other computer
//! of the same world runs the real guest.

use crate::{bin, World, WorldOptions};
use anyhow::Result;

/// A world whose local computers run `rogue_guest`, with the guest deadline
/// (`RAKAZO_GUEST_TIMEOUT_SECS`) short enough for a test.
pub fn options(guest_timeout_secs: u64, idle_timeout_secs: Option<u64>) -> WorldOptions {
    WorldOptions {
        guest_bin: Some(bin("rogue_guest")),
        idle_timeout_secs,
        // The API logs each failed checkpoint; the local store clears a failed one's staging
        // at its next commit.
        allow_warn: vec![
            "home checkpoint failed".into(),
            "discarding an unfinished home commit".into(),
            "are not contained".into(),
        ],
        env: vec![
            (
                "RAKAZO_GUEST_TIMEOUT_SECS".into(),
                guest_timeout_secs.to_string(),
            ),
            // The rogue guest takes its orders from a marker in the local root (`stall_next`),
            // which a jail would hide from it.
            ("RAKAZO_LOCAL_CONTAINMENT".into(), "off".into()),
        ],
        ..Default::default()
    }
}

/// Makes the next computer created in `w` stall (its guest takes the marker at start).
pub fn stall_next(w: &World) -> Result<()> {
    let root = w.machines_dir.path().join("local");
    std::fs::create_dir_all(&root)?;
    std::fs::write(root.join("rogue-next"), b"stall")?;
    Ok(())
}
