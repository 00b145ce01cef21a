//! `/v1/computers/{id}/activity`: a computer's activity feed, as history and live.
//!
//! - `GET …/activity?after=&before=&limit=&order=`: a page ([`ActivityPage`]) of the events
//!   with `after < seq < before` (defaults: all), at most `limit` (default 100, at most 500),
//!   `order=asc` (default: oldest first, to page forward with `after`) or `desc` (newest first,
//!   to page back with `before`). `last_seq` is the newest event's seq.
//! - `GET …/activity/stream?after=`: server-sent events (`text/event-stream`), every event
//!   after `after` (default: the newest now, i.e. only what comes next) as it is recorded,
//!   until the client leaves; `: keepalive` comments keep a quiet stream open.
//!
//! Neither enters idle suspension's gate (`crate::route::IdleUse::None`): reading or following the feed is
//! not a use, so a follower never keeps a computer awake. A destroyed computer's history stays
//! readable.

use super::body::{json_response, ApiError, ChannelBody, RespBody};
use super::Api;
use crate::activity::store::{Order, PageQuery, MAX_PAGE};
use crate::computers::ComputerId;
use crate::schema::activity::ActivityPage;
use http_body_util::BodyExt;
use hyper::{header, Response, StatusCode};
use std::collections::HashMap;
use std::sync::Arc;

/// Events a page answers unless `limit` says otherwise.
const DEFAULT_LIMIT: u32 = 100;

/// The computer whose feed is asked for: it must exist (destroyed is fine).
async fn computer(api: &Arc<Api>, id: &str) -> Result<String, ApiError> {
    let not_found = || ApiError::not_found(format!("computer {id} not found"));
    let cid = ComputerId::new(id).map_err(|_| not_found())?;
    match api.core.computers.get(&cid).await {
        Ok(Some(_)) => Ok(cid.as_str().to_string()),
        Ok(None) => Err(not_found()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

fn seq_param(q: &HashMap<String, String>, name: &str) -> Result<Option<u64>, ApiError> {
    q.get(name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("{name} must be a non-negative integer (a seq)"))
            })
        })
        .transpose()
}

pub async fn history(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let computer = computer(api, id).await?;
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "limit must be 1..={MAX_PAGE}"
                )))
            }
        },
    };
    let order = match q.get("order").map(String::as_str) {
        None | Some("asc") => Order::OldestFirst,
        Some("desc") => Order::NewestFirst,
        Some(_) => return Err(ApiError::bad_request("order must be asc or desc")),
    };
    let query = PageQuery {
        after: seq_param(q, "after")?.unwrap_or(0),
        before: seq_param(q, "before")?,
        limit,
        order,
    };
    let store = &api.core.activity.store;
    let events = store
        .page(&computer, query)
        .await
        .map_err(ApiError::internal)?;
    let last_seq = store
        .last_seq(&computer)
        .await
        .map_err(ApiError::internal)?;
    Ok(json_response(
        StatusCode::OK,
        &ActivityPage { events, last_seq },
    ))
}

pub async fn stream(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let computer = computer(api, id).await?;
    let after = match seq_param(q, "after")? {
        Some(after) => after,
        None => api
            .core
            .activity
            .store
            .last_seq(&computer)
            .await
            .map_err(ApiError::internal)?,
    };
    let (tx, body) = ChannelBody::new(16);
    tokio::spawn(crate::activity::feed::follow(
        api.core.activity.clone(),
        computer,
        after,
        tx,
    ));
    let mut resp = Response::new(body.boxed());
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    Ok(resp)
}
