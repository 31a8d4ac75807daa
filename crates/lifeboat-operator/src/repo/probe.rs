//! Whether an S3-compatible store behind a BackupRepo answers, with the repo's own settings and
//! credentials. A repo is only `Ready` when this passes: a typo in the endpoint or a stopped
//! store must show on the BackupRepo, not hours later as a failed backup Job.

use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{Certificate, ClientOptions, ObjectStore, RetryConfig};

/// How long one probe may take before the store counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and as whom to probe.
pub struct S3Target<'a> {
    pub s3: &'a super::access::S3Settings,
    pub prefix: &'a str,
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
}

/// Lists the repo's prefix once. `Err` carries one line saying why the store cannot be used.
pub async fn probe_s3(t: &S3Target<'_>) -> Result<(), String> {
    let s3 = t.s3;
    let mut client = ClientOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(PROBE_TIMEOUT);
    if let Some(pem) = &s3.ca_bundle {
        let certs = Certificate::from_pem_bundle(pem.as_bytes())
            .map_err(|e| format!("spec.config.caBundle: {}", one_line(&e)))?;
        if certs.is_empty() {
            return Err("spec.config.caBundle holds no PEM certificate".into());
        }
        for cert in certs {
            client = client.with_root_certificate(cert);
        }
    }
    let store = AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_region(s3.region.as_deref().unwrap_or("us-east-1"))
        .with_bucket_name(&s3.bucket)
        .with_virtual_hosted_style_request(s3.virtual_hosted)
        .with_access_key_id(t.access_key_id)
        .with_secret_access_key(t.secret_access_key)
        // One attempt: the controller re-probes on its own schedule, and a retry loop here would
        // hold a reconcile slot for minutes.
        .with_retry(RetryConfig {
            max_retries: 0,
            retry_timeout: PROBE_TIMEOUT,
            ..Default::default()
        })
        .with_client_options(client)
        // After the client options, which would otherwise reset it.
        .with_allow_http(s3.endpoint.starts_with("http://"))
        .build()
        .map_err(|e| format!("s3 settings rejected: {}", one_line(&e)))?;
    let prefix = Path::from(t.prefix.trim_matches('/'));
    match tokio::time::timeout(PROBE_TIMEOUT, store.list_with_delimiter(Some(&prefix))).await {
        Err(_) => Err(format!(
            "endpoint {} did not answer within {}s",
            s3.endpoint,
            PROBE_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => {
            let detail = without_timings(&one_line(&e));
            Err(format!(
                "listing bucket {} at endpoint {} failed: {}",
                s3.bucket,
                s3.endpoint,
                s3_error(&detail).unwrap_or(detail)
            ))
        }
        Ok(Ok(_)) => Ok(()),
    }
}

/// The store's own verdict (`403 Forbidden SignatureDoesNotMatch: ...`) when the error carries an
/// S3 XML error body, which says more to an operator than the client's wrapping of it.
fn s3_error(detail: &str) -> Option<String> {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = detail.find(&open)? + open.len();
        let len = detail[start..].find(&format!("</{name}>"))?;
        Some(detail[start..start + len].to_owned())
    };
    let code = tag("Code")?;
    let message = tag("Message").unwrap_or_default();
    let status = detail
        .split_once("status code: ")
        .and_then(|(_, rest)| rest.split_once(':'))
        .map(|(s, _)| format!("{s} "))
        .unwrap_or_default();
    Some(format!("{status}{code}: {message}"))
}

/// `detail` without the client's request timings (`… GET http://h/b in 5.2ms …`, `after 0
/// retries in 1.3s`). The message goes into the repo's status, and a message that differs on
/// every probe made every probe a status write, whose watch event started the next probe at
/// once: a repo whose store was down wrote its status ten times a second.
fn without_timings(detail: &str) -> String {
    const UNITS: &[&str] = &["ns", "µs", "us", "ms", "s"];
    let mut out = String::with_capacity(detail.len());
    let mut rest = detail;
    while let Some(i) = rest.find(" in ") {
        let after = &rest[i + 4..];
        let number = after
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(after.len());
        let unit = UNITS.iter().find(|u| {
            after[number..].starts_with(**u)
                && !after[number + u.len()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
        });
        match unit {
            Some(u) if number > 0 => {
                out.push_str(&rest[..i]);
                rest = &after[number + u.len()..];
            }
            _ => {
                out.push_str(&rest[..i + 4]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The error and its causes on one line, as a status message must be.
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let msg = s.to_string();
        if !out.contains(&msg) {
            out.push_str(": ");
            out.push_str(&msg);
        }
        cur = s.source();
    }
    out.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_error_body_becomes_its_code_and_message() {
        let d = "Generic S3 error: Error performing list request: Error performing GET http://h/b in 5ms - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?> <Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match.</Message><BucketName>b</BucketName></Error>";
        assert_eq!(
            s3_error(d).as_deref(),
            Some(
                "403 Forbidden SignatureDoesNotMatch: The request signature we calculated does not match."
            )
        );
    }

    #[test]
    fn request_timings_are_left_out_so_that_a_failing_store_gives_one_message() {
        let at = |t: &str| {
            format!(
                "Generic S3 error: Error after 0 retries in {t}, max_retries:0, retry_timeout:10s, source:error sending request for url (http://10.200.0.1:39123/doomed?list-type=2): Error performing GET http://10.200.0.1:39123/doomed in {t} - tcp connect error: Connection refused (os error 111)"
            )
        };
        let a = without_timings(&at("1.618ms"));
        assert_eq!(a, without_timings(&at("27.5µs")));
        assert_eq!(a, without_timings(&at("2s")));
        assert_eq!(
            a,
            "Generic S3 error: Error after 0 retries, max_retries:0, retry_timeout:10s, source:error sending request for url (http://10.200.0.1:39123/doomed?list-type=2): Error performing GET http://10.200.0.1:39123/doomed - tcp connect error: Connection refused (os error 111)"
        );
        // Words after " in " are kept.
        assert_eq!(
            without_timings("bucket b in 5 regions in 3smart ways"),
            "bucket b in 5 regions in 3smart ways"
        );
    }

    #[test]
    fn a_connection_error_is_kept_whole() {
        assert_eq!(
            s3_error("tcp connect error: Connection refused (os error 111)"),
            None
        );
    }
}
