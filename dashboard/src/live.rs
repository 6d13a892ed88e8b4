//! Live updates: `GET /events` streams Server-Sent Events, one `snapshot` event at once and
//! one per change of the snapshot. Its data is every resource row of every quota (the
//! numbers the bars show), which the page's script writes into the page in place; the
//! script then refreshes the page's structural parts (`data-fragment`) by fetching the
//! page again — never a reload.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
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
/// is no longer accepted.
pub async fn events(
    State(d): State<Dashboard>,
    v: Visible,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut rx = d.snapshot.clone();
    rx.mark_changed();
    let who = d.access.clone().zip(v.viewer);
    let stream = futures::stream::unfold((rx, who), |(mut rx, who)| async move {
        rx.changed().await.ok()?;
        let s = rx.borrow_and_update().clone();
        let s = match &who {
            None => s,
            Some((access, viewer)) => match access.user(&viewer.token).await {
                Ok(Some(user)) => Arc::new(access.restrict(&s, &user).await),
                _ => return None,
            },
        };
        Some((Ok(event(&s)), (rx, who)))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}
