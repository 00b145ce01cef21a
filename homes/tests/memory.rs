//! Bounded memory: checkpoint a 32 MiB home to a real s3s-fs and restore it, and check that the
//! process's peak RSS grew by far less than the home (issue 6 asks for at most 64 MB of growth).
//! A test binary of its own, so no other test shares the process while it measures.

mod support;

use homes::archive::{pack_reader, restore_async, UnpackOptions};
use homes::seal::ContentKey;
use homes::testing::{manifest, noise};
use homes::{HomeKey, HomeStore, MemRevisionLedger, ObjectHomeStore, ObjectStoreConfig};
use support::S3sFs;

const HOME_BYTES: usize = 32 << 20;
const MAX_GROWTH_KIB: u64 = 64 << 10;

/// A `VmRSS`/`VmHWM` line of /proc/self/status, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_and_restore_run_in_bounded_memory() {
    let s3 = S3sFs::start().await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    std::fs::create_dir_all(src.join("data")).unwrap();
    for i in 0..6u64 {
        let chunk = noise(HOME_BYTES / 6, i);
        std::fs::write(src.join(format!("data/part-{i}")), chunk).unwrap();
    }
    let mut config = ObjectStoreConfig::new("mem", "us-east-1", "test", "test");
    config.endpoint = Some(s3.endpoint.clone());
    config.force_path_style = true;
    let store = ObjectHomeStore::new(
        &config,
        ContentKey::generate(),
        MemRevisionLedger::default(),
    );
    store
        .client()
        .create_bucket()
        .bucket("mem")
        .send()
        .await
        .unwrap();
    let home = HomeKey::new("bot-mem").unwrap();
    // Warm up the client and the runtime so their one-time allocations are in the baseline.
    std::fs::create_dir(tmp.path().join("warm")).unwrap();
    store
        .commit(&home, pack_reader(tmp.path().join("warm")))
        .await
        .unwrap();

    // Reset the peak to the current RSS (Linux: "5" to clear_refs resets VmHWM).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let baseline = status_kib("VmRSS:");
    store.commit(&home, pack_reader(src.clone())).await.unwrap();
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    let dst = tmp.path().join("restored");
    restore_async(cp.archive, dst.clone(), UnpackOptions::default())
        .await
        .unwrap();
    let growth = status_kib("VmHWM:").saturating_sub(baseline);
    println!(
        "peak RSS growth for a {} MiB home: {} KiB",
        HOME_BYTES >> 20,
        growth
    );
    assert!(
        growth < MAX_GROWTH_KIB,
        "peak RSS grew by {growth} KiB for a {} MiB home",
        HOME_BYTES >> 20
    );
    assert_eq!(manifest(&dst).unwrap(), manifest(&src).unwrap());
}
