//! What the document says about the screen recording routes (docs/recordings.md).

use super::super::{bytes, integer, json_body, json_ok, query, without_required, Doc};
use super::{op, Operation, JSON_BODY};
use crate::route::Endpoint;
use crate::schema::code::ApiCode::*;
use crate::schema::recording::{RecordingList, RecordingSetting, SetRecording};

/// The operation of recording route `e` (`None`: not a recording route).
pub(super) fn describe(e: Endpoint, doc: &mut Doc) -> Option<Operation> {
    Some(match e {
        Endpoint::SetRecording => op(
            "recordings",
            "Turn recording of the computer's screens on or off: each live screen's frames and \
             inputs (the bots' and, under takeover, a person's; typed text only as a count), \
             kept sealed beside the homes for the server's retention.",
            (200, json_ok("The setting.", doc.of::<RecordingSetting>())),
            [JSON_BODY, &[NotFound]].concat(),
        )
        .body(json_body(doc.of::<SetRecording>(), true)),
        Endpoint::SetWorkspaceRecording => op(
            "recordings",
            "Set whether a workspace's computers are recorded by default: those without a \
             recording setting of their own.",
            (
                200,
                json_ok("The workspace's default.", doc.of::<RecordingSetting>()),
            ),
            [JSON_BODY, &[NotFound]].concat(),
        )
        .body(json_body(doc.of::<SetRecording>(), true)),
        Endpoint::ListRecordings => op(
            "recordings",
            "Whether the computer is recorded, and what was recorded of each bot.",
            (200, json_ok("Its recordings.", doc.of::<RecordingList>())),
            vec![NotFound],
        ),
        Endpoint::ReadRecording => op(
            "recordings",
            "A bot's recording over a time range, in the record format of docs/recordings.md \
             (what `rakazo recording export` turns into a video and the console plays).",
            (200, without_required(bytes("The records, in time order."))),
            vec![BadRequest, NotFound],
        )
        .query([
            query(
                "since",
                false,
                "From this time (ms since 1970); pieces that straddle it come whole.",
                integer(0, None),
            ),
            query(
                "until",
                false,
                "Up to this time (ms since 1970).",
                integer(0, None),
            ),
        ]),
        _ => return None,
    })
}
