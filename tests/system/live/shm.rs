//! SysV shared memory: no segment outlives the desktops or their viewers.

use super::*;

/// The SysV shared-memory segments of the computer's user (its own system user when the
/// control plane runs as root, as in CI; else the test's own user, shared with whatever else
/// runs as it).
fn segments_of(uid: u32) -> Result<Vec<u64>> {
    let mut ids: Vec<u64> = tests::procstat::shm_segments()?
        .into_iter()
        .filter(|s| s.uid == uid || s.cuid == uid)
        .map(|s| s.shmid)
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Desktops, their viewers and a controller, observations and acts, then teardown and a stop of
/// the computer: no SysV shared-memory segment of the computer's user is left (x11vnc, which
/// served views before Xvnc, leaked them when it was killed; the guest's own MIT-SHM capture
/// uses a memfd, never a SysV segment).
#[tokio::test]
async fn no_sysv_shared_memory_segment_outlives_desktops_or_their_viewers() -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-live-shm").await?;
    let guest = *tests::pids_with_env("RAKAZO_COMPUTER_ID", &c)
        .first()
        .ok_or_else(|| anyhow!("no guest process for {c}"))?;
    let uid = std::fs::metadata(format!("/proc/{guest}"))?.uid();
    let baseline = segments_of(uid)?;

    let page = site.page(
        "moving",
        "<html><body style='margin:0'><div id=d style='width:200px;height:200px;\
         background:rgb(0,90,200)'></div><script>let i = 0; setInterval(() => \
         { d.style.marginLeft = (i++ % 50) * 10 + 'px'; }, 30);</script></body></html>",
    );
    let bots = [Bot::new(&c, "bot-a"), Bot::new(&c, "bot-b")];
    let mut viewers = Vec::new();
    for bot in &bots {
        bot.desktop(&w).await?;
        let lease = w.lease(&c, &bot.bot, "run-shm").await?;
        w.post(
            &bot.path("act"),
            serde_json::json!({ "lease": lease, "actions": [
                { "type": "open", "url": page }, { "type": "click", "x": 640, "y": 400 }
            ]}),
        )
        .await?;
        w.post(&bot.path("observe"), serde_json::json!({ "lease": lease }))
            .await?;
        bot.end_run(&w, &lease).await?;
        let view = bot.url(&mut w, "view").await?;
        let mut rfb = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
        rfb.sync().await?;
        viewers.push(rfb);
    }
    bots[0].takeover(&w).await?;
    let control = bots[0].url(&mut w, "control").await?;
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &control).await?)).await?;
    driver.pointer(300, 300, 0).await?;
    driver.sync().await?;
    // The moving page keeps the viewers' incremental updates coming.
    for rfb in &mut viewers {
        for _ in 0..5 {
            rfb.request_update(true).await?;
            rfb.read_update().await?;
        }
    }
    let live = segments_of(uid)?;
    drop(driver);
    drop(viewers);
    bots[0].release_control(&w).await?;
    for bot in &bots {
        w.post(&bot.path("release"), serde_json::json!({})).await?;
    }
    let released = segments_of(uid)?;
    w.client
        .json(
            hyper::Method::POST,
            &format!("/v1/computers/{c}/stop"),
            None,
        )
        .await?;
    let stopped = segments_of(uid)?;
    assert_eq!(
        (released, stopped),
        (baseline.clone(), baseline.clone()),
        "segments of uid {uid}: baseline {baseline:?}, with live desktops {live:?}"
    );
    w.check_log()?;
    Ok(())
}
