//! Live updates: `GET /events` streams Server-Sent Events, one `snapshot` event at once and
//! one per change of the snapshot. Its data is every resource row of every quota (the
//! numbers the bars show), which the page's script writes into the page in place; the
//! script then refreshes the page's structural parts (`data-fragment`) by fetching the
//! page again — never a reload.
//!
//! Streams are capped ([`Streams`](crate::streams::Streams)): beyond the total or the
//! viewer's share the answer is 503. A stream ends when its viewer's token is no longer
//! accepted or their session ended (logout).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::model::{Level, Snapshot};
use crate::pages::rfc3339;
use crate::{Dashboard, Visible};

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The data of one `snapshot` event.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveUpdate {
    /// When the snapshot was taken (RFC 3339).
    pub generated: String,
    /// The quotas, as `namespace/name`, in the overview's order.
    pub quotas: Vec<String>,
    /// Every resource row.
    pub rows: Vec<LiveRow>,
}

/// One resource row, keyed like the page's `data-row` attribute.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveRow {
    /// `namespace/name|resource`.
    pub key: String,
    /// Used.
    pub used: String,
    /// Reserved.
    pub reserved: String,
    /// Hard.
    pub hard: String,
    /// Free.
    pub free: String,
    /// `82.5%` or `-`.
    pub percent: String,
    /// Bar width of used.
    pub used_width: f64,
    /// Bar width of reserved.
    pub reserved_width: f64,
    /// Level.
    pub level: Level,
}

impl LiveUpdate {
    /// The update for `s`.
    pub fn of(s: &Snapshot) -> Self {
        let groups = crate::view::groups(s);
        let mut quotas = Vec::new();
        let mut rows = Vec::new();
        for q in groups.iter().flat_map(|g| g.quotas.iter()) {
            quotas.push(q.key.clone());
            rows.extend(q.rows.iter().map(|r| LiveRow {
                key: format!("{}|{}", q.key, r.resource),
                used: r.used.clone(),
                reserved: r.reserved.clone(),
                hard: r.hard.clone(),
                free: r.free.clone(),
                percent: r.percent_text(),
                used_width: r.used_width,
                reserved_width: r.reserved_width,
                level: r.level,
            }));
        }
        Self {
            generated: rfc3339(s.generated_at),
            quotas,
            rows,
        }
    }
}

fn event(s: &Snapshot) -> Event {
    Event::default()
        .event("snapshot")
        .json_data(LiveUpdate::of(s))
        .unwrap_or_else(|_| Event::default().comment("unserializable snapshot"))
}

/// `GET /events`: each update restricted to what the viewer may see; the viewer's token
/// is reviewed again (through the cache) before every event, and the stream ends when it
/// is no longer accepted or the session it came with ended. 503 beyond the stream caps.
pub async fn events(State(d): State<Dashboard>, v: Visible) -> Response {
    let user = v.viewer.as_ref().map(|x| x.user.name.clone());
    let permit = match d.streams.open(user.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(user = user.as_deref().unwrap_or("-"), error = %e, "live stream refused");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({ "error": e.to_string() })),
            )
                .into_response();
        }
    };
    let mut rx = d.snapshot.clone();
    rx.mark_changed();
    let who = d.access.clone().zip(v.viewer);
    let sessions = d.sessions.clone();
    let state = (rx, who, permit);
    let stream = futures::stream::unfold(state, move |(mut rx, who, permit)| {
        let sessions = sessions.clone();
        async move {
            rx.changed().await.ok()?;
            let s = rx.borrow_and_update().clone();
            let s = match &who {
                None => s,
                Some((access, viewer)) => {
                    if let Some(id) = &viewer.session
                        && !sessions.contains(id)
                    {
                        return None;
                    }
                    // Accepted when the stream opened: never held back by the rate of
                    // new tokens.
                    match access.known_user(&viewer.token).await {
                        Ok(Some(user)) => Arc::new(access.restrict(&s, &user).await),
                        _ => return None,
                    }
                }
            };
            Some((Ok::<_, Infallible>(event(&s)), (rx, who, permit)))
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
