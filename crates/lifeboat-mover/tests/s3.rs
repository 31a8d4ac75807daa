//! The round trip through a real S3-compatible server (MinIO built from its Go module).

#![allow(clippy::unwrap_used)]

mod support;

use support::*;

const SOCIAL_Q: &str =
    "MATCH (a:Person)-[k:KNOWS]->(b:Person) RETURN a.name, k.since, b.name ORDER BY a.name";

#[test]
fn s3_round_trip_against_minio() {
    let minio = Minio::start("lifeboat");
    let creds = minio.credentials_dir();
    let creds = creds.path().to_str().unwrap().to_string();
    let endpoint = minio.endpoint();
    let repo = "s3://lifeboat/clusters/falkor-a".to_string();
    let s3 = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--repo".into(),
            repo.clone(),
            "--s3-endpoint".into(),
            endpoint.clone(),
            "--s3-credentials-dir".into(),
            creds.clone(),
        ]);
        v
    };

    let t = tempfile::tempdir().unwrap();
    let src = Server::start(&t.path().join("src"), true);
    populate(&src);
    // Enough data for several multipart parts, and noise: the RDB compresses values, so a
    // pattern would leave it a few MiB.
    let mut c = src.con();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..40 {
        let v: Vec<u8> = (0..(512 * 1024u32))
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        redis::cmd("SET")
            .arg(format!("blob:{i}"))
            .arg(v)
            .query::<()>(&mut c)
            .unwrap();
    }
    let rows = graph_rows(&mut c, 0, "social", SOCIAL_Q);

    let mut a = s3(&["backup", "--backup", "s3-1"]);
    a.extend(src.args());
    let out = mover(&a, &[]);
    let summary = out.assert_ok().json();
    assert!(summary["totalSize"].as_u64().unwrap() > 20 << 20, "{out}");

    // Credentials from the environment work as well as from files.
    let env_out = mover(
        &[
            "inspect",
            "--backup",
            "s3-1",
            "--repo",
            &repo,
            "--s3-endpoint",
            &endpoint,
            "--json",
        ],
        &[
            ("AWS_ACCESS_KEY_ID", &minio.user),
            ("AWS_SECRET_ACCESS_KEY", &minio.password),
        ],
    );
    assert_eq!(
        env_out.assert_ok().json()["fingerprint"],
        summary["fingerprint"]
    );
    // And wrong ones are refused loudly.
    let denied = mover(
        &[
            "inspect",
            "--backup",
            "s3-1",
            "--repo",
            &repo,
            "--s3-endpoint",
            &endpoint,
        ],
        &[
            ("AWS_ACCESS_KEY_ID", &minio.user),
            ("AWS_SECRET_ACCESS_KEY", "wrong-secret"),
        ],
    );
    denied.assert_fails(
        6,
        &[
            "repo s3://lifeboat/clusters/falkor-a",
            "manifest of backup \"s3-1\"",
        ],
    );

    let dst = t.path().join("dst");
    let r = mover(
        &s3(&[
            "restore",
            "--backup",
            "s3-1",
            "--target",
            dst.to_str().unwrap(),
        ]),
        &[],
    );
    r.assert_ok();
    let restored = Server::start(&dst, true);
    let mut v = s3(&["verify", "--backup", "s3-1"]);
    v.extend(restored.args());
    let vo = mover(&v, &[]);
    assert_eq!(vo.code, 0, "{vo}\n{}", restored.log_tail());
    let mut rc = restored.con();
    assert_eq!(graph_rows(&mut rc, 0, "social", SOCIAL_Q), rows);
    redis::cmd("SELECT").arg(0).query::<()>(&mut rc).unwrap();
    let blob: Vec<u8> = redis::cmd("GET").arg("blob:7").query(&mut rc).unwrap();
    assert_eq!(blob.len(), 512 * 1024);

    mover(
        &s3(&[
            "restore",
            "--backup",
            "absent",
            "--target",
            t.path().join("x").to_str().unwrap(),
        ]),
        &[],
    )
    .assert_fails(
        7,
        &["backup \"absent\" not found in repo s3://lifeboat/clusters/falkor-a"],
    );
}

/// An in-house authority in front of the store: the mover reaches it with the authority's PEM
/// (`LIFEBOAT_S3_CA_BUNDLE`, set by the operator from a BackupRepo's `spec.config.caBundle`),
/// refuses it without, and refuses a bundle that holds no certificate, naming the setting.
#[test]
fn an_endpoint_signed_by_a_private_authority_is_reached_only_with_its_bundle() {
    let minio = Minio::start_tls("lifeboat");
    let ca = minio.ca_pem.clone().unwrap();
    let endpoint = minio.endpoint();
    assert!(endpoint.starts_with("https://"), "{endpoint}");
    let creds = minio.credentials_dir();
    let repo = "s3://lifeboat/tls".to_string();
    let args = |verb: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = verb.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--repo".into(),
            repo.clone(),
            "--s3-endpoint".into(),
            endpoint.clone(),
            "--s3-credentials-dir".into(),
            creds.path().to_str().unwrap().into(),
        ]);
        v
    };
    let with_ca = [("LIFEBOAT_S3_CA_BUNDLE", ca.as_str())];

    let t = tempfile::tempdir().unwrap();
    let src = Server::start(&t.path().join("src"), true);
    populate(&src);
    let rows = graph_rows(&mut src.con(), 0, "social", SOCIAL_Q);
    let mut b = args(&["backup", "--backup", "tls-1"]);
    b.extend(src.args());
    let summary = mover(&b, &with_ca).assert_ok().json();

    // Without the bundle the store's certificate is not trusted, and the error says it is the
    // certificate, not the credentials or the bucket.
    let untrusted = mover(&args(&["inspect", "--backup", "tls-1"]), &[]);
    untrusted.assert_fails(6, &["repo s3://lifeboat/tls"]);
    let line = untrusted.error_line().to_lowercase();
    assert!(line.contains("certificate"), "{untrusted}");

    let not_pem = mover(
        &args(&["inspect", "--backup", "tls-1"]),
        &[("LIFEBOAT_S3_CA_BUNDLE", "not a certificate")],
    );
    not_pem.assert_fails(2, &["LIFEBOAT_S3_CA_BUNDLE", "no PEM certificate"]);

    let dst = t.path().join("dst");
    mover(
        &args(&[
            "restore",
            "--backup",
            "tls-1",
            "--target",
            dst.to_str().unwrap(),
        ]),
        &with_ca,
    )
    .assert_ok();
    let restored = Server::start(&dst, true);
    let mut v = args(&["verify", "--backup", "tls-1"]);
    v.extend(restored.args());
    let vo = mover(&v, &with_ca);
    assert_eq!(vo.code, 0, "{vo}\n{}", restored.log_tail());
    assert_eq!(
        vo.json()["live"]["digests"],
        summary["fingerprint"]["digests"],
        "{vo}"
    );
    assert_eq!(graph_rows(&mut restored.con(), 0, "social", SOCIAL_Q), rows);
}
