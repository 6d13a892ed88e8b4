//! `kubectl karmada-quota queue`: the waiting lines (docs/queueing.md) as the controller
//! writes them into each quota's `status.queue`. Pure: quotas in, table out.

use karmada_quota_crds::quota::KarmadaQuotaStatus;

use crate::cluster::age;
use crate::render::table;

/// One quota's line: its name as printed, and its status.
pub struct QuotaLine<'a> {
    /// `name`, or `cluster/name` for a KarmadaClusterQuota.
    pub quota: String,
    /// Its status (the line is `status.queue`).
    pub status: Option<&'a KarmadaQuotaStatus>,
}

fn list(
    map: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
) -> String {
    if map.is_empty() {
        return "-".to_owned();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={}", v.0))
        .collect::<Vec<_>>()
        .join(",")
}

/// The table: one row per waiting binding listed, in line order per quota; a quota whose
/// line lists fewer than wait says how many more.
pub fn render(lines: &[QuotaLine<'_>], now: jiff::Timestamp) -> String {
    let mut rows = Vec::new();
    let mut more = Vec::new();
    for l in lines {
        let Some(queue) = l.status.and_then(|s| s.queue.as_ref()) else {
            continue;
        };
        for w in &queue.waiting {
            let binding = if w.namespace.is_empty() {
                w.name.clone()
            } else {
                format!("{}/{}", w.namespace, w.name)
            };
            let mut short = list(&w.short);
            if let Some(why) = &w.stuck {
                short = format!("stuck: {why}");
            }
            rows.push(vec![
                l.quota.clone(),
                w.position.to_string(),
                binding,
                w.priority.to_string(),
                list(&w.asks),
                short,
                age(now, w.since.0),
            ]);
        }
        let listed = i64::try_from(queue.waiting.len()).unwrap_or(i64::MAX);
        if queue.total > listed {
            more.push(format!(
                "{}: {} more waiting (status lists the first {listed})",
                l.quota,
                queue.total - listed
            ));
        }
    }
    if rows.is_empty() {
        return "Nothing waits.\n".to_owned();
    }
    let header = [
        "QUOTA", "POS", "BINDING", "PRIORITY", "ASKS", "SHORT", "WAITING",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut out = table(header, rows);
    for m in more {
        out.push_str(&m);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use karmada_quota_crds::quota::{QueueStatus, WaitingBinding};

    fn waiting(position: i64, name: &str, short: &str, since: i64) -> WaitingBinding {
        WaitingBinding {
            position,
            namespace: String::new(),
            name: name.into(),
            priority: 10,
            asks: [("requests.nvidia.com/gpu".to_owned(), Quantity("4".into()))].into(),
            short: if short.is_empty() {
                Default::default()
            } else {
                [("requests.nvidia.com/gpu".to_owned(), Quantity(short.into()))].into()
            },
            since: Time(jiff::Timestamp::from_second(since).unwrap()),
            stuck: None,
        }
    }

    #[test]
    fn the_line_prints_in_order_with_what_each_lacks_and_how_many_more_wait() {
        let status = KarmadaQuotaStatus {
            queue: Some(QueueStatus {
                total: 3,
                waiting: vec![
                    waiting(1, "train-a", "2", 1000),
                    waiting(2, "train-b", "", 1100),
                ],
            }),
            ..Default::default()
        };
        let now = jiff::Timestamp::from_second(1192).unwrap();
        let out = render(
            &[QuotaLine {
                quota: "training".into(),
                status: Some(&status),
            }],
            now,
        );
        let expected = "\
QUOTA      POS   BINDING   PRIORITY   ASKS                        SHORT                       WAITING
training   1     train-a   10         requests.nvidia.com/gpu=4   requests.nvidia.com/gpu=2   3m
training   2     train-b   10         requests.nvidia.com/gpu=4   -                           92s
training: 1 more waiting (status lists the first 2)
";
        assert_eq!(out, expected);
    }

    #[test]
    fn an_empty_line_says_so() {
        let status = KarmadaQuotaStatus::default();
        let out = render(
            &[QuotaLine {
                quota: "q".into(),
                status: Some(&status),
            }],
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(out, "Nothing waits.\n");
    }
}
