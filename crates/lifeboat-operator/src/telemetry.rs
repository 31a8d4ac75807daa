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
