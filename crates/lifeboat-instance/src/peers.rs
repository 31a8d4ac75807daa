//! Reading peers' reports.

use std::time::Duration;

use crate::decide::Peer;
use crate::report::Report;

/// Reads one peer's report; any failure makes it unreachable, with the reason.
pub async fn fetch(client: &reqwest::Client, host: &str, port: u16) -> Peer {
    let unreachable = |why: String| Peer::Unreachable {
        host: host.to_owned(),
        why,
    };
    let url = format!("http://{host}:{port}/report");
    let resp = match client.get(&url).send().await {
        Ok(r) => r,
        Err(e) => return unreachable(short(&e)),
    };
    if !resp.status().is_success() {
        return unreachable(format!("answered {}", resp.status()));
    }
    match resp.bytes().await {
        Ok(b) => match serde_json::from_slice::<Report>(&b) {
            Ok(r) => Peer::Reported(r),
            Err(e) => unreachable(format!("unreadable report: {e}")),
        },
        Err(e) => unreachable(short(&e)),
    }
}

/// The innermost cause: "connection refused" says more than the URL wrapper around it.
fn short(e: &reqwest::Error) -> String {
    let mut src: &dyn std::error::Error = e;
    while let Some(s) = src.source() {
        src = s;
    }
    if e.is_timeout() {
        "timed out".into()
    } else {
        src.to_string()
    }
}

/// An HTTP client with the manager's deadline.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_default()
}

/// Reads every peer's report (all hosts but `me`).
pub async fn fetch_all(
    client: &reqwest::Client,
    hosts: &[String],
    me: &str,
    port: u16,
) -> Vec<Peer> {
    let mut out = Vec::new();
    for h in hosts.iter().filter(|h| h.as_str() != me) {
        out.push(fetch(client, h, port).await);
    }
    out
}
