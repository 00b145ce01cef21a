//! Each type against the JSON the API answered before it had types (the handlers' `json!`):
//! the same fields, the same `null`s and omissions, and back again.

use super::browser::{Element, PageDone, PageFailed, PageRequest, PageResult, Snapshot, Step};
use super::computer::{Computer, ComputerKind, ComputerState, CreateComputer, IdleReport};
use super::error::{ErrorBody, ErrorInfo};
use super::exec::{Chunk, ExecLine, ExecSpec};
use super::files::{Entry, EntryKind};
use super::home::{HomeDone, HomeLine, Reconciled};
use super::lease::{LeaseReleased, LeaseRequest, RunCheckpoint};
use super::screen::{
    ActRequest, ActResult, Action, Cursor, LeaseBody, MouseButton, Observation, ObserveRequest,
    ScrollDirection, UrlRequest, WaitingTakeoverRequest,
};
use super::Empty;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Debug;

/// `typed` serializes to `want`, and `want` parses back to `typed`.
fn same<T: Serialize + DeserializeOwned + PartialEq + Debug>(typed: &T, want: Value) {
    assert_eq!(serde_json::to_value(typed).unwrap(), want);
    assert_eq!(&serde_json::from_value::<T>(want).unwrap(), typed);
}

fn refused<T: DeserializeOwned + Debug>(v: Value) {
    assert!(serde_json::from_value::<T>(v.clone()).is_err(), "{v}");
}

#[test]
fn errors_and_empty_bodies() {
    let info = ErrorInfo {
        code: "not_found".into(),
        message: "no such computer".into(),
        uncertain: false,
    };
    let body = ErrorBody {
        error: info.clone(),
    };
    same(
        &body,
        json!({ "error": { "code": "not_found", "message": "no such computer", "uncertain": false } }),
    );
    let old = json!({ "error": { "code": "not_found", "message": "no such computer" } });
    assert_eq!(serde_json::from_value::<ErrorBody>(old).unwrap(), body);
    same(&Empty {}, json!({}));
    refused::<Empty>(json!({ "x": 1 }));
}

#[test]
fn computers() {
    let create = CreateComputer {
        workspace: Some("acme".into()),
        ..Default::default()
    };
    same(&create, json!({ "workspace": "acme" }));
    let limited = CreateComputer {
        private_bot: Some("bot-7".into()),
        provider: Some("docker".into()),
        limits: providers::MachineLimits {
            memory_mb: Some(512),
            ..Default::default()
        },
        ..Default::default()
    };
    same(
        &limited,
        json!({ "private_bot": "bot-7", "provider": "docker", "limits": { "memory_mb": 512 } }),
    );
    refused::<CreateComputer>(json!({ "workspace": "acme", "color": "red" }));
    let placed = CreateComputer {
        workspace: Some("acme".into()),
        placement: Some("b".into()),
        ..Default::default()
    };
    same(&placed, json!({ "workspace": "acme", "placement": "b" }));
    let c = Computer {
        id: "c-1".into(),
        kind: ComputerKind::Team,
        workspace: Some("acme".into()),
        bot: None,
        home_key: "team-acme".into(),
        provider: "local".into(),
        limits: Default::default(),
        placement: None,
        state: ComputerState::Running,
        connected: true,
        created_at_ms: 1,
        updated_at_ms: 2,
        idle: Some(IdleReport {
            decision: "awake".into(),
            reason: "used within the idle timeout".into(),
            at_ms: 3,
            until_ms: Some(4),
        }),
        machine: None,
        pool: None,
        from_pool: None,
    };
    assert_eq!(super::wire_name(&c.state), "running");
    assert_eq!(super::wire_name(&c.id), "c-1");
    assert_eq!(super::wire_name(&c.connected), "");
    same(
        &c,
        json!({
            "id": "c-1", "kind": "team", "workspace": "acme", "home_key": "team-acme",
            "provider": "local", "state": "running", "connected": true, "created_at_ms": 1,
            "updated_at_ms": 2,
            "idle": { "decision": "awake", "reason": "used within the idle timeout",
                      "at_ms": 3, "until_ms": 4 },
        }),
    );
    let placed = Computer {
        placement: Some("b".into()),
        idle: None,
        ..c
    };
    assert_eq!(serde_json::to_value(&placed).unwrap()["placement"], "b");
}

#[test]
fn exec_spec_and_lines() {
    let spec = ExecSpec {
        argv: vec!["true".into()],
        ..Default::default()
    };
    same(&spec, json!({ "argv": ["true"], "env": {} }));
    let bare: ExecSpec = serde_json::from_value(json!({ "argv": ["true"] })).unwrap();
    assert_eq!(bare, spec);
    refused::<ExecSpec>(json!({ "argv": ["true"], "shell": true }));
    same(
        &ExecLine::Started { pid: 7 },
        json!({ "type": "started", "pid": 7 }),
    );
    same(
        &ExecLine::Stdout(Chunk::of(b"hi\n")),
        json!({ "type": "stdout", "data": "hi\n" }),
    );
    let binary = ExecLine::Stderr(Chunk::of(&[0xff, 0]));
    same(&binary, json!({ "type": "stderr", "data_b64": "/wA=" }));
    let ExecLine::Stderr(chunk) = binary else {
        unreachable!()
    };
    assert_eq!(chunk.bytes().unwrap(), [0xff, 0]);
    same(
        &ExecLine::Exit {
            code: 3,
            message: None,
        },
        json!({ "type": "exit", "code": 3, "message": null }),
    );
    same(
        &ExecLine::Error(ErrorInfo {
            code: "tunnel_lost".into(),
            message: "lost".into(),
            uncertain: true,
        }),
        json!({ "type": "error", "code": "tunnel_lost", "message": "lost", "uncertain": true }),
    );
}

#[test]
fn entries() {
    let e = Entry {
        path: "bin/tool.sh".into(),
        kind: EntryKind::File,
        size: 9,
        executable: true,
    };
    same(
        &e,
        json!({ "path": "bin/tool.sh", "kind": "file", "size": 9, "executable": true }),
    );
}

#[test]
fn screens_observe_and_act() {
    same(
        &LeaseBody {
            lease: Some("run-1:1".into()),
        },
        json!({ "lease": "run-1:1" }),
    );
    same(&LeaseBody { lease: None }, json!({ "lease": null }));
    let obs = Observation {
        frame_id: "ab".into(),
        captured_at: 5,
        mime_type: "image/png".into(),
        width: 1280,
        height: 800,
        screen_width: 1280,
        screen_height: 800,
        kind: "unchanged".into(),
        base_frame_id: None,
        regions: Vec::new(),
        marks: None,
        marks_note: None,
        cursor: Cursor { x: 1, y: 2 },
        active_window: None,
        unchanged: true,
        image: None,
        note: Some("unchanged".into()),
    };
    let want = json!({
        "frameId": "ab", "capturedAt": 5, "mimeType": "image/png", "width": 1280,
        "height": 800, "screenWidth": 1280, "screenHeight": 800, "kind": "unchanged",
        "cursor": { "x": 1, "y": 2 }, "activeWindow": null, "unchanged": true,
        "image": null, "note": "unchanged",
    });
    same(&obs, want.clone());
    let acted = ActResult {
        ok: true,
        completed: 2,
        settled_ms: 40,
        settled: true,
        observation: Some(obs),
    };
    same(
        &acted,
        json!({ "ok": true, "completed": 2, "settledMs": 40, "settled": true,
                "observation": want }),
    );
    let raw = json!([
        { "type": "click", "x": 10, "y": 20.4 },
        { "type": "click", "x": 1, "y": 1, "button": "right", "double": true },
        { "type": "click", "ref": "e15" },
        { "type": "scroll", "direction": "down" },
        { "type": "wait" },
        { "type": "key", "key": "a", "modifiers": ["ctrl"] },
        { "type": "open", "url": "http://x/" },
        { "type": "focus", "application": "firefox" },
    ]);
    let actions: Vec<Action> = serde_json::from_value(raw.clone()).unwrap();
    assert!(matches!(
        &actions[1],
        Action::Click {
            button: Some(MouseButton::Right),
            double: Some(true),
            ..
        }
    ));
    assert!(matches!(
        &actions[3],
        Action::Scroll {
            direction: ScrollDirection::Down,
            amount: None
        }
    ));
    assert_eq!(serde_json::to_value(&actions).unwrap(), raw);
    for bad in [
        json!({ "type": "fly" }),
        json!({ "type": "click", "x": 1, "y": 1, "button": "middle" }),
        json!({ "type": "click", "x": 1, "y": 1, "z": 1 }),
        json!({ "type": "scroll", "direction": "left" }),
        json!("click"),
    ] {
        refused::<Action>(bad);
    }
    let act = ActRequest {
        lease: "run-1:1".into(),
        actions: vec![Action::Wait { ms: None }],
        observe: false,
        settle_ms: None,
        frame: None,
        observe_options: None,
    };
    same(
        &act,
        json!({ "lease": "run-1:1", "actions": [{ "type": "wait" }], "observe": false }),
    );
    let observe: ObserveRequest =
        serde_json::from_value(json!({ "lease": "run-1:1", "width": 640, "marks": true })).unwrap();
    assert_eq!(
        (observe.options().width, observe.options().marks),
        (Some(640), true)
    );
    refused::<ObserveRequest>(json!({ "lease": "run-1:1", "scale": 2 }));
    same(
        &UrlRequest {
            policy: Some("control".into()),
            ttl_secs: None,
        },
        json!({ "policy": "control" }),
    );
    let waiting: WaitingTakeoverRequest =
        serde_json::from_value(json!({ "lease": "run-1:1" })).unwrap();
    assert!(waiting.waiting);
}

#[test]
fn page_tools() {
    let req = PageRequest {
        lease: "run-1:1".into(),
        steps: Some(vec![
            Step::Click {
                element: "e1".into(),
            },
            Step::Fill {
                element: "e2".into(),
                text: "x".into(),
                origin: Some("https://a.test".into()),
            },
        ]),
        ..Default::default()
    };
    same(
        &req,
        json!({ "lease": "run-1:1", "steps": [
            { "type": "click", "ref": "e1" },
            { "type": "fill", "ref": "e2", "text": "x", "origin": "https://a.test" },
        ] }),
    );
    refused::<Step>(json!({ "type": "hover", "ref": "e1" }));
    refused::<Step>(json!({ "type": "click", "ref": "e1", "x": 1 }));
    let done = PageResult::Done(PageDone {
        ok: true,
        snapshot: Snapshot {
            url: "http://x/".into(),
            title: "X".into(),
            elements: vec![Element {
                element: "e1".into(),
                role: "button".into(),
                name: "Go".into(),
                value: String::new(),
                tag: "button".into(),
            }],
            tree: "Go".into(),
        },
        completed: Some(1),
    });
    same(
        &done,
        json!({ "ok": true, "completed": 1, "snapshot": {
            "url": "http://x/", "title": "X", "tree": "Go",
            "elements": [{ "ref": "e1", "role": "button", "name": "Go", "value": "", "tag": "button" }],
        } }),
    );
    let failed = PageResult::Failed(PageFailed {
        ok: false,
        completed: 0,
        uncertain: false,
        error: "Stale element ref. Take a fresh snapshot.".into(),
        fallback: "computer_act".into(),
    });
    same(
        &failed,
        json!({ "ok": false, "completed": 0, "uncertain": false,
                "error": "Stale element ref. Take a fresh snapshot.", "fallback": "computer_act" }),
    );
    assert!(done.ok() && !failed.ok());
}

#[test]
fn leases() {
    same(
        &LeaseRequest {
            owner: Some("run-42".into()),
            ..Default::default()
        },
        json!({ "owner": "run-42" }),
    );
    refused::<LeaseRequest>(json!({ "owner": "run-42", "fence": 3 }));
    for (checkpoint, want) in [
        (
            RunCheckpoint::Saved {
                revision: 2,
                bytes: 10,
            },
            json!({ "status": "saved", "revision": 2, "bytes": 10 }),
        ),
        (
            RunCheckpoint::Deferred {
                waiting_for: vec!["bot-2".into()],
            },
            json!({ "status": "deferred", "waiting_for": ["bot-2"] }),
        ),
        (
            RunCheckpoint::Skipped {
                reason: "no guest".into(),
            },
            json!({ "status": "skipped", "reason": "no guest" }),
        ),
        (
            RunCheckpoint::Failed { error: "x".into() },
            json!({ "status": "failed", "error": "x" }),
        ),
    ] {
        same(
            &LeaseReleased {
                released: true,
                checkpoint,
            },
            json!({ "released": true, "checkpoint": want }),
        );
    }
}

#[test]
fn home_lines_and_reconcile() {
    same(
        &HomeLine::Progress {
            phase: "exporting".into(),
            done: 1,
            total: 2,
        },
        json!({ "type": "progress", "phase": "exporting", "done": 1, "total": 2 }),
    );
    let checkpointed = HomeDone {
        revision: Some(3),
        bytes: Some(100),
        content_bytes: None,
        entries: None,
    };
    same(
        &HomeLine::Done(checkpointed),
        json!({ "type": "done", "revision": 3, "bytes": 100 }),
    );
    let nothing = HomeDone {
        revision: None,
        bytes: None,
        content_bytes: None,
        entries: None,
    };
    same(
        &HomeLine::Done(nothing),
        json!({ "type": "done", "revision": null }),
    );
    same(
        &Reconciled::Local {
            temporaries_removed: 1,
            temporaries_young: 2,
            temporaries_failed: 3,
        },
        json!({ "store": "local", "temporaries_removed": 1, "temporaries_young": 2,
                "temporaries_failed": 3 }),
    );
    // An older control plane's answer.
    assert_eq!(
        serde_json::from_value::<Reconciled>(json!({ "store": "local" })).unwrap(),
        Reconciled::Local {
            temporaries_removed: 0,
            temporaries_young: 0,
            temporaries_failed: 0,
        }
    );
    same(
        &Reconciled::Object {
            kept: 1,
            deleted: 2,
            foreign: 3,
            aborted_uploads: 4,
            abort_failed: 5,
        },
        json!({ "store": "object", "kept": 1, "deleted": 2, "foreign": 3,
                "aborted_uploads": 4, "abort_failed": 5 }),
    );
}
