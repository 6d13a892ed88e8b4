//! Printing `check`'s verdict for people: per quota what the change adds, then what would
//! be refused and why.

use crate::check::Verdict;

fn list(map: &std::collections::BTreeMap<String, String>, names: &[&String]) -> String {
    names
        .iter()
        .map(|n| format!("{n}={}", map.get(*n).map_or("0", String::as_str)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The report as text.
pub fn render(report: &Verdict) -> String {
    let mut out = String::new();
    for q in &report.quotas {
        let names: Vec<&String> = q.hard.keys().collect();
        let verdict = if q.fits { "fits" } else { "EXCEEDS" };
        if q.cluster {
            out.push_str(&format!(
                "KarmadaClusterQuota {} (every namespace it selects): {verdict}\n",
                q.name
            ));
        } else {
            out.push_str(&format!(
                "KarmadaQuota {}/{}: {verdict}\n",
                q.namespace, q.name
            ));
        }
        out.push_str(&format!("  now:    {}\n", list(&q.current, &names)));
        out.push_str(&format!("  adds:   {}\n", list(&q.added, &names)));
        out.push_str(&format!("  after:  {}\n", list(&q.after, &names)));
        out.push_str(&format!("  hard:   {}\n", list(&q.hard, &names)));
        let key = if q.cluster {
            q.name.clone()
        } else {
            format!("{}/{}", q.namespace, q.name)
        };
        let refused = report.refused.iter().filter(|r| r.quota == key).count();
        if refused > 0 {
            // `adds` and `after` count the templates that fit; say so, or an all-refused
            // change reads as "adds 0".
            let s = if refused == 1 { "" } else { "s" };
            out.push_str(&format!(
                "  refused: {refused} template{s} that would not fit (below), not counted in adds/after\n"
            ));
        }
    }
    if report.quotas.is_empty() {
        out.push_str("No KarmadaQuota or KarmadaClusterQuota applies to these manifests.\n");
    }
    for r in &report.refused {
        out.push_str(&format!(
            "REFUSED {} by {}: {}\n",
            r.template, r.quota, r.message
        ));
        if !r.charge.is_empty() {
            let names: Vec<&String> = r.charge.keys().collect();
            out.push_str(&format!("  it would add: {}\n", list(&r.charge, &names)));
        }
    }
    for u in &report.unselected {
        out.push_str(&format!(
            "note: {u} is selected by no policy in these manifests: not charged\n"
        ));
    }
    for n in &report.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    for e in &report.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    out.push_str(if report.fits() {
        "Result: the change fits every quota.\n"
    } else {
        "Result: the change exceeds a quota.\n"
    });
    out
}
