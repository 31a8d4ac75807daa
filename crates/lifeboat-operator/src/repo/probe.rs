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
            let detail = one_line(&e);
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
    fn a_connection_error_is_kept_whole() {
        assert_eq!(
            s3_error("tcp connect error: Connection refused (os error 111)"),
            None
        );
    }
}
