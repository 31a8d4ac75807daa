//! Structured logs: JSON for machines (the default in the Deployment), text for a terminal.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `format` is `json` or `text`.
pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,lifeboat_operator=debug"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

static NEXT_RECONCILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The span of one reconcile. Every line logged inside it carries the controller, the object's
/// namespace and name, and an id that tells one reconcile's lines from the next's, so that all
/// the lines of a restore can be found by the Cluster's name.
pub fn reconcile_span(controller: &str, namespace: Option<&str>, name: &str) -> tracing::Span {
    let id = NEXT_RECONCILE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::info_span!(
        "reconcile",
        controller,
        namespace = namespace.unwrap_or(""),
        // Not `name`: the JSON format keeps that key for the span's own name.
        object = name,
        reconcile_id = id
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_logged_in_a_reconcile_names_the_object_and_the_reconcile() {
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(sub, || {
            let _a = reconcile_span("cluster", Some("demo"), "fdb").entered();
            tracing::info!("restoring");
        });
        let out = String::from_utf8(buf.0.lock().expect("buffer").clone()).expect("utf-8");
        let line: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
        let span = &line["span"];
        assert_eq!(span["object"], "fdb", "{out}");
        assert_eq!(span["namespace"], "demo", "{out}");
        assert_eq!(span["controller"], "cluster", "{out}");
        assert!(span["reconcile_id"].as_u64().is_some(), "{out}");
    }
}
