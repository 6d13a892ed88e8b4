//! What the JSON log says about a review: every line of a ResourceBinding review carries
//! its `review` span with `binding` (`namespace/name`), `namespace` and `operation` — the
//! field the controller's fold of the binding carries too — and the denial line's own
//! `binding` says the same; a reservation batch's lines carry its name and namespace.

use std::io::Write;

use super::*;

/// Log lines written into memory, as the binaries write them with `--log-format=json`.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// Collect the JSON lines at debug and above of everything run while the guard lives
    /// (the test's runtime is single-threaded: the batcher's worker runs on it too).
    fn capture() -> (Lines, tracing::subscriber::DefaultGuard) {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || sink.clone())
            .finish();
        (lines, tracing::subscriber::set_default(subscriber))
    }

    fn parsed(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The line whose message is `message`; panics with every line when there is none.
    fn with_message(&self, message: &str) -> Value {
        let all = self.parsed();
        all.iter()
            .find(|l| l["fields"]["message"] == message)
            .cloned()
            .unwrap_or_else(|| panic!("no line {message:?} in {all:#?}"))
    }
}

#[tokio::test]
async fn a_review_logs_in_a_span_that_names_the_binding() {
    let (lines, _guard) = Lines::capture();
    let h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "2")],
        &[("requests.cpu", "0")],
    )]);
    assert!(
        verdict(
            &h.review_binding(create_rb(mk_binding("web", "uid-web", 1, 1, "1", "")))
                .await
        )
        .0
    );
    let allowed = lines.with_message("ResourceBinding allowed");
    assert_eq!(allowed["span"]["name"], "review");
    assert_eq!(allowed["span"]["binding"], "team-a/web");
    assert_eq!(allowed["span"]["namespace"], "team-a");
    assert_eq!(allowed["span"]["operation"], "Create");
    assert_eq!(allowed["span"]["kind"], "resourcebinding");
    assert!(
        allowed["fields"].get("binding").is_none(),
        "the span names it: {allowed}"
    );

    let batch = lines.with_message("reservation batch created");
    assert_eq!(batch["span"]["name"], "batch_commit");
    assert_eq!(batch["span"]["batch"], "kqr-000000000001");
    assert_eq!(batch["fields"]["requests"], 1);
    let outer = &batch["spans"][0];
    assert_eq!(outer["name"], "reservation_batch", "{batch}");
    assert_eq!(outer["namespace"], "team-a");

    // Too big: the denial line names the binding as the span does.
    h.review_binding(create_rb(mk_binding("big", "uid-big", 1, 5, "1", "")))
        .await;
    let denied = lines.with_message("ResourceBinding denied: exceeded quota: compute, requested: requests.cpu=5, used: requests.cpu=1, limited: requests.cpu=2");
    assert_eq!(denied["span"]["binding"], "team-a/big");
    assert_eq!(denied["fields"]["binding"], "team-a/big");
}
