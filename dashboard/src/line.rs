//! What the quota page shows of a waiting line (docs/queueing.md): each waiting binding's
//! place, what it asks, what it waits for and since when, and how many the viewer does not
//! see. Pure, so the template only prints.

use crate::model::{Line, Quota, Waiting};
use crate::view::{human_age, list_text};

/// A quota's waiting line, printed.
#[derive(Clone, Debug, PartialEq)]
pub struct LineView {
    /// Whether new arrivals that do not fit wait (`false`: switched back to refusal).
    pub queueing: bool,
    /// `StrictFIFO` or `BestEffortFIFO`.
    pub order: String,
    /// What the order means, in a few words.
    pub order_text: &'static str,
    /// How many wait in all.
    pub total: i64,
    /// How many of them are not listed: beyond the head the status keeps, or in namespaces
    /// the viewer may not see.
    pub unlisted: i64,
    /// The listed ones, in order.
    pub rows: Vec<WaitingRow>,
}

/// One waiting binding, printed.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitingRow {
    /// 1-based place in the whole line.
    pub position: i64,
    /// `name`, or `namespace/name` in a cluster quota's line.
    pub binding: String,
    /// Scheduling priority.
    pub priority: i32,
    /// `requests.cpu=2, pods=1`.
    pub asks: String,
    /// What it waits for: the quota's shortfall, those ahead, or why it is stuck.
    pub waits_for: String,
    /// How long it has waited: `3m20s`.
    pub waited: String,
    /// It cannot be released whatever room there is.
    pub stuck: bool,
}

impl LineView {
    /// The line of `q` as of `now` (Unix seconds), if it has one.
    pub fn of(q: &Quota, now: i64) -> Option<Self> {
        let line: &Line = q.line.as_ref()?;
        let rows: Vec<WaitingRow> = line
            .waiting
            .iter()
            .map(|w| WaitingRow::of(w, q.namespace.is_empty(), now))
            .collect();
        Some(Self {
            queueing: line.queueing,
            order: line.order.clone(),
            order_text: if line.order == "StrictFIFO" {
                "nothing passes the head of the line"
            } else {
                "later work that fits may start while the head waits"
            },
            total: line.total,
            unlisted: (line.total - i64::try_from(rows.len()).unwrap_or(i64::MAX)).max(0),
            rows,
        })
    }
}

impl WaitingRow {
    fn of(w: &Waiting, cluster_quota: bool, now: i64) -> Self {
        let waits_for = match &w.stuck {
            Some(why) => format!("stuck: {why}"),
            None if w.short.0.is_empty() => {
                if w.position > 1 {
                    "fits here: waits for those ahead or for another quota".to_owned()
                } else {
                    "fits here: waits for another quota covering it".to_owned()
                }
            }
            None => format!("{} more free", list_text(&w.short)),
        };
        Self {
            position: w.position,
            binding: if cluster_quota {
                format!("{}/{}", w.namespace, w.name)
            } else {
                w.name.clone()
            },
            priority: w.priority,
            asks: list_text(&w.asks),
            waits_for,
            waited: human_age((now - w.since).max(0)),
            stuck: w.stuck.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::rl;

    fn waiting(position: i64, name: &str, short: &[(&str, &str)]) -> Waiting {
        Waiting {
            position,
            namespace: "team-b".into(),
            name: name.into(),
            priority: 10,
            asks: rl(&[("requests.cpu", "2"), ("pods", "1")]),
            short: rl(short),
            since: 1_000,
            stuck: None,
        }
    }

    #[test]
    fn prints_place_asks_shortfall_and_wait_and_counts_what_is_not_listed() {
        let mut q = Quota {
            namespace: "team-b".into(),
            name: "q".into(),
            line: Some(Line {
                queueing: true,
                order: "StrictFIFO".into(),
                total: 5,
                waiting: vec![
                    waiting(1, "train", &[("requests.cpu", "500m")]),
                    waiting(2, "etl", &[]),
                ],
            }),
            ..Quota::default()
        };
        let v = LineView::of(&q, 1_200).unwrap();
        assert_eq!((v.total, v.unlisted), (5, 3));
        assert_eq!(v.order_text, "nothing passes the head of the line");
        assert_eq!(
            v.rows[0],
            WaitingRow {
                position: 1,
                binding: "train".into(),
                priority: 10,
                asks: "pods=1, requests.cpu=2".into(),
                waits_for: "requests.cpu=500m more free".into(),
                waited: "3m20s".into(),
                stuck: false,
            }
        );
        assert_eq!(
            v.rows[1].waits_for,
            "fits here: waits for those ahead or for another quota"
        );
        // A cluster quota's line names the namespace; a stuck binding says why.
        q.namespace.clear();
        q.line.as_mut().unwrap().waiting[1].stuck = Some("requests.memory is required".into());
        let v = LineView::of(&q, 1_200).unwrap();
        assert_eq!(v.rows[1].binding, "team-b/etl");
        assert_eq!(v.rows[1].waits_for, "stuck: requests.memory is required");
        assert!(v.rows[1].stuck);
        // No line: nothing to show.
        q.line = None;
        assert_eq!(LineView::of(&q, 1_200), None);
    }
}
