//! Grounded observations (issue 34) through the real binaries, Xvnc and Chromium: marks drawn on
//! the right elements at three frame scales and two device scale factors, and under page zoom
//! (each mark's box centre, given in the scaled frame's coordinates, and each mark's ref,
//! clicked and read back from the page), changed regions that rebuild the frame exactly, and
//! bad inputs refused.

use anyhow::{anyhow, ensure, Context, Result};
use base64::Engine;
use serde_json::{json, Value};
use tests::bot::Bot;
use tests::fixture::Fixture;
use tests::{World, WorldOptions};

/// The repository's test page: 30 controls of six kinds named k1..k30.
const PAGE: &str = include_str!("../pages/grounding.html");
/// Clicks per act (a batch holds at most 24).
const CHUNK: usize = 12;

/// A decoded PNG: width, height, RGB bytes.
struct Image {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

fn decode(b64: &str) -> Result<Image> {
    let png = base64::engine::general_purpose::STANDARD.decode(b64)?;
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().context("png size")?];
    let info = reader.next_frame(&mut buf)?;
    ensure!(
        info.color_type == png::ColorType::Rgb,
        "{:?}",
        info.color_type
    );
    buf.truncate(info.buffer_size());
    Ok(Image {
        width: info.width,
        height: info.height,
        rgb: buf,
    })
}

fn paste(base: &mut Image, piece: &Image, x: u32, y: u32) -> Result<()> {
    ensure!(x + piece.width <= base.width && y + piece.height <= base.height);
    for row in 0..piece.height {
        let dst = ((y + row) * base.width + x) as usize * 3;
        let src = (row * piece.width) as usize * 3;
        let n = piece.width as usize * 3;
        base.rgb[dst..dst + n].copy_from_slice(&piece.rgb[src..src + n]);
    }
    Ok(())
}

async fn observe(b: &Bot<'_>, options: Value) -> Result<Value> {
    let mut body = json!({ "lease": b.lease });
    if let (Some(o), Some(extra)) = (body.as_object_mut(), options.as_object()) {
        o.extend(extra.clone());
    }
    Ok(b.w.post(&b.path("observe"), body).await?)
}

async fn act(b: &Bot<'_>, actions: Value, frame: Option<(u64, u64)>) -> Result<Value> {
    let mut body = json!({ "lease": b.lease, "actions": actions });
    if let Some((w, h)) = frame {
        body["frame"] = json!({ "width": w, "height": h });
    }
    Ok(b.w.post(&b.path("act"), body).await?)
}

/// The bot's page snapshot.
async fn snapshot(b: &Bot<'_>) -> Result<Value> {
    let path = format!("/v1/computers/{}/browser/{}/snapshot", b.computer, b.bot);
    let snap = b.w.post(&path, json!({ "lease": b.lease })).await?;
    Ok(snap["snapshot"].clone())
}

async fn title(b: &Bot<'_>) -> Result<String> {
    Ok(snapshot(b).await?["title"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// Runs the clicks in batches of [`CHUNK`] and checks after each that the page saw exactly the
/// expected elements clicked, in order.
async fn clicks_land(
    b: &Bot<'_>,
    clicks: &[(Value, String)],
    frame: Option<(u64, u64)>,
    what: &str,
) -> Result<()> {
    for chunk in clicks.chunks(CHUNK) {
        let actions: Vec<Value> = chunk.iter().map(|(a, _)| a.clone()).collect();
        act(b, Value::Array(actions), frame).await?;
        let want: Vec<&str> = chunk.iter().map(|(_, k)| k.as_str()).collect();
        let got = title(b).await?;
        let seen: Vec<&str> = got.split(' ').collect();
        let tail = &seen[seen.len().saturating_sub(want.len())..];
        ensure!(
            tail == want.as_slice(),
            "{what}: clicked {want:?}, the page saw {got:?}"
        );
    }
    Ok(())
}

/// Observes with marks at `width` and clicks every mark twice: at its box centre in the frame's
/// coordinates, and by its ref.
async fn marks_hit_their_elements(b: &Bot<'_>, width: Option<u64>, dsf: &str) -> Result<()> {
    let mut options = json!({ "marks": true, "full": true });
    if let Some(w) = width {
        options["width"] = json!(w);
    }
    let obs = observe(b, options).await?;
    let (fw, fh) = (
        obs["width"].as_u64().context("width")?,
        obs["height"].as_u64().context("height")?,
    );
    ensure!(
        obs["screenWidth"] == 1280 && obs["screenHeight"] == 800,
        "{obs}"
    );
    if let Some(w) = width {
        ensure!(fw == w && fh == (800 * w + 640) / 1280, "{fw}x{fh}");
    }
    ensure!(obs["marksNote"].is_null(), "{}", obs["marksNote"]);
    let marks = obs["marks"].as_array().context("marks")?;
    let mut names: Vec<&str> = marks.iter().filter_map(|m| m["name"].as_str()).collect();
    names.sort_unstable();
    let mut want: Vec<String> = (1..=30).map(|i| format!("k{i}")).collect();
    want.sort_unstable();
    ensure!(names == want, "dsf {dsf}, width {fw}: marked {names:?}");
    // To look at the marked frames: RAKAZO_MARKS_PNG_DIR=<dir>.
    if let Some(dir) = std::env::var_os("RAKAZO_MARKS_PNG_DIR") {
        let png = base64::engine::general_purpose::STANDARD
            .decode(obs["image"].as_str().context("image")?)?;
        let path = std::path::Path::new(&dir).join(format!("marks-dsf{dsf}-{fw}.png"));
        std::fs::write(path, png)?;
    }
    let image = decode(obs["image"].as_str().context("image")?)?;
    ensure!((u64::from(image.width), u64::from(image.height)) == (fw, fh));

    let mut centres = Vec::new();
    let mut refs = Vec::new();
    for m in marks {
        let name = m["name"].as_str().context("name")?.to_string();
        let (x, y) = (m["x"].as_u64().context("x")?, m["y"].as_u64().context("y")?);
        let (w, h) = (
            m["width"].as_u64().context("w")?,
            m["height"].as_u64().context("h")?,
        );
        ensure!(
            x + w <= fw && y + h <= fh,
            "mark {m} outside the {fw}x{fh} frame"
        );
        centres.push((
            json!({ "type": "click", "x": x + w / 2, "y": y + h / 2 }),
            name.clone(),
        ));
        refs.push((json!({ "type": "click", "ref": m["ref"] }), name));
    }
    let what = format!("dsf {dsf}, frame {fw}x{fh}");
    clicks_land(b, &centres, Some((fw, fh)), &format!("{what}, box centres")).await?;
    clicks_land(b, &refs, None, &format!("{what}, refs")).await
}

/// A changed part of the screen sent as regions, pasted onto the previous frame, equals the
/// whole frame of the same moment.
async fn regions_rebuild_the_frame(b: &Bot<'_>, width: Option<u64>) -> Result<()> {
    let mut options = json!({ "full": true });
    if let Some(w) = width {
        options["width"] = json!(w);
    }
    let base = observe(b, options.clone()).await?;
    ensure!(base["kind"] == "full", "{}", base["kind"]);
    let mut rebuilt = decode(base["image"].as_str().context("image")?)?;
    // One click: the title in the tab strip changes, little else.
    act(
        b,
        json!([{ "type": "click", "ref": first_ref(b).await? }]),
        None,
    )
    .await?;
    let mut changes = options.clone();
    changes["full"] = json!(false);
    changes["changes"] = json!(true);
    let part = observe(b, changes).await?;
    ensure!(part["kind"] == "regions", "{}", part["kind"]);
    ensure!(part["baseFrameId"] == base["frameId"], "{part}");
    ensure!(part["image"].is_null());
    let regions = part["regions"].as_array().context("regions")?;
    ensure!(!regions.is_empty());
    let mut region_bytes = 0;
    for r in regions {
        let img = r["image"].as_str().context("region image")?;
        region_bytes += img.len();
        let piece = decode(img)?;
        ensure!(
            (u64::from(piece.width), u64::from(piece.height))
                == (
                    r["width"].as_u64().unwrap_or(0),
                    r["height"].as_u64().unwrap_or(0)
                )
        );
        let (x, y) = (r["x"].as_u64().unwrap_or(0), r["y"].as_u64().unwrap_or(0));
        paste(&mut rebuilt, &piece, x as u32, y as u32)?;
    }
    let whole = observe(b, options).await?;
    ensure!(
        whole["frameId"] == part["frameId"],
        "the screen changed between the two observations"
    );
    let whole_b64 = whole["image"].as_str().context("image")?;
    ensure!(
        region_bytes < whole_b64.len(),
        "regions cost {region_bytes}"
    );
    let whole = decode(whole_b64)?;
    ensure!((rebuilt.width, rebuilt.height) == (whole.width, whole.height));
    ensure!(
        rebuilt.rgb == whole.rgb,
        "pasted regions differ from the whole frame"
    );
    // Nothing changed since: unchanged, no bytes.
    let again = observe(b, json!({ "changes": true, "width": width })).await?;
    ensure!(
        again["kind"] == "unchanged" && again["unchanged"] == true,
        "{again}"
    );
    Ok(())
}

async fn first_ref(b: &Bot<'_>) -> Result<String> {
    let snap = snapshot(b).await?;
    snap["elements"][0]["ref"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| anyhow!("no element in {snap}"))
}

/// The status and message of a refused call.
async fn refused(b: &Bot<'_>, path: &str, body: Value) -> Result<String> {
    match b.w.post(&b.path(path), body).await {
        Ok(v) => Err(anyhow!("{path} accepted: {v}")),
        Err(e) => Ok(e.to_string()),
    }
}

/// An act's observation takes the observe options: scaled, marked.
async fn act_observes_with_options(b: &Bot<'_>) -> Result<()> {
    let body = json!({
        "lease": b.lease,
        "actions": [{ "type": "wait", "ms": 0 }],
        "observe": true,
        "observe_options": { "width": 640, "marks": true, "full": true },
    });
    let v = b.w.post(&b.path("act"), body).await?;
    let o = &v["observation"];
    ensure!(
        o["width"] == 640 && o["height"] == 400 && o["kind"] == "full",
        "{o}"
    );
    ensure!(
        o["marks"].as_array().map(Vec::len) == Some(30),
        "{}",
        o["marks"]
    );
    Ok(())
}

async fn bad_inputs_are_refused(b: &Bot<'_>) -> Result<()> {
    let lease = b.lease.clone();
    for (body, want) in [
        (
            json!({ "lease": lease, "width": 0 }),
            "width must be 16..=8192",
        ),
        (
            json!({ "lease": lease, "width": 9000 }),
            "width must be 16..=8192",
        ),
        (
            json!({ "lease": lease, "width": 5000 }),
            "wider than the screen",
        ),
        (
            json!({ "lease": lease, "changes": true, "full": true }),
            "exclude each other",
        ),
        (json!({ "lease": lease, "scale": 2 }), "unknown field"),
    ] {
        let err = refused(b, "observe", body.clone()).await?;
        ensure!(
            err.contains("bad_request") && err.contains(want),
            "{body}: {err}"
        );
    }
    for (actions, frame, want) in [
        (
            json!([{ "type": "click", "ref": "e999999" }]),
            None,
            "element e999999: Stale element ref",
        ),
        (
            json!([{ "type": "click", "ref": "submit" }]),
            None,
            "element ref like e12",
        ),
        (
            json!([{ "type": "click", "ref": "e1", "x": 3, "y": 4 }]),
            None,
            "not both",
        ),
        (
            json!([{ "type": "click", "x": 3, "y": 4 }]),
            Some(json!({ "width": 640, "height": 0 })),
            "frame height",
        ),
    ] {
        let mut body = json!({ "lease": lease, "actions": actions });
        if let Some(f) = frame {
            body["frame"] = f;
        }
        let err = refused(b, "act", body.clone()).await?;
        ensure!(
            err.contains("bad_request") && err.contains(want),
            "{body}: {err}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn marks_regions_and_scaled_frames_are_grounded() -> Result<()> {
    let fx = Fixture::start().await?;
    let url = fx.page("grounding", PAGE);
    // Device scale factors 1 and 2, each on one computer reused for every frame scale.
    for dsf in ["1", "2"] {
        let guest_env = match dsf {
            "1" => Vec::new(),
            _ => vec![("RAKAZO_BROWSER_SCALE".to_string(), dsf.to_string())],
        };
        let mut w = World::start_with(WorldOptions {
            guest_env,
            ..WorldOptions::default()
        })
        .await?;
        let c = w.create_computer(&format!("ws-grounding-{dsf}")).await?;
        let b = Bot::new(&w, &c, "bot-g").await?;
        b.navigate(&url).await?;
        regions_rebuild_the_frame(&b, None).await?;
        regions_rebuild_the_frame(&b, Some(640)).await?;
        for width in [None, Some(960), Some(640)] {
            marks_hit_their_elements(&b, width, dsf)
                .await
                .with_context(|| format!("dsf {dsf}, width {width:?}"))?;
        }
        if dsf == "1" {
            // Page zoom 125% (ctrl+= twice): devicePixelRatio 1.25, fewer CSS pixels across.
            let zoom = json!({ "type": "key", "key": "=", "modifiers": ["ctrl"] });
            act(&b, json!([zoom, zoom]), None).await?;
            for width in [None, Some(640)] {
                marks_hit_their_elements(&b, width, "1-zoom125")
                    .await
                    .with_context(|| format!("zoom 125%, width {width:?}"))?;
            }
            let reset = json!({ "type": "key", "key": "0", "modifiers": ["ctrl"] });
            act(&b, json!([reset]), None).await?;
        }
        act_observes_with_options(&b).await?;
        bad_inputs_are_refused(&b).await?;
        b.release().await?;
        drop(b);
        w.check_log()?;
    }
    Ok(())
}
