//! The checks that come before a restore creates anything. Pure: given the Cluster's request
//! and the Backup and repo as observed, either the restore may start or it fails naming why.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, BackupRepoPhase};
use lifeboat_api::labels::RESTORE_GRANT;
use lifeboat_api::{Backup, BackupRepo};

use super::intent::ComponentRestore;
use crate::cluster::validate::ValidCluster;

/// Checks a component's restore against its Backup and repo.
pub fn check(
    req: &ComponentRestore,
    cluster_ns: &str,
    valid: &ValidCluster,
    backup: Option<&Backup>,
    repo: Option<&BackupRepo>,
) -> Result<(), String> {
    let what = format!("Backup {}/{}", req.backup_namespace, req.backup_name);
    let Some(backup) = backup else {
        return Err(format!("{what} does not exist"));
    };
    if req.backup_namespace != cluster_ns {
        let granted = backup
            .annotations()
            .get(RESTORE_GRANT)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .any(|n| n == cluster_ns || n == "*")
            })
            .unwrap_or(false);
        if !granted {
            return Err(format!(
                "{what} is in another namespace and grants no restore to namespace {cluster_ns}: \
                 annotate the Backup with {RESTORE_GRANT}={cluster_ns}"
            ));
        }
    }
    let status = backup.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Completed) => {}
        other => {
            let phase = other
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "New".into());
            return Err(format!("{what} is {phase}, not Completed"));
        }
    }
    let Some(dataset) = status.dataset else {
        return Err(format!(
            "{what} has no dataset manifest in its status, so its content cannot be verified"
        ));
    };
    if dataset.engine != valid.engine.cluster_def() {
        return Err(format!(
            "{what} holds a {} dataset, but this Cluster's clusterDef is {}",
            dataset.engine,
            valid.engine.cluster_def()
        ));
    }
    let comp = valid
        .components
        .iter()
        .find(|c| c.spec.name == req.component)
        .ok_or_else(|| format!("component {:?} is not part of the Cluster", req.component))?;
    if dataset.component != req.component {
        return Err(format!(
            "{what} was taken from component {:?}, not {:?}",
            dataset.component, req.component
        ));
    }
    let requested = comp
        .spec
        .volume_claim_templates
        .iter()
        .find(|t| t.name == "data")
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let Some(requested) = requested else {
        return Err(format!(
            "spec.componentSpecs[{}].volumeClaimTemplates needs a `data` volume with a storage \
             request to restore into",
            comp.index
        ));
    };
    let bytes = quantity_bytes(requested).ok_or_else(|| {
        format!(
            "spec.componentSpecs[{}].volumeClaimTemplates[data] storage {:?} is not a size",
            comp.index, requested.0
        )
    })?;
    // The restored files take their uncompressed size, and the server needs room for an AOF
    // rewrite next to them.
    if bytes < dataset.data_bytes.saturating_mul(2) {
        return Err(format!(
            "spec.componentSpecs[{}].volumeClaimTemplates[data] requests {} but {what} needs at \
             least {} bytes (twice its {} bytes of data)",
            comp.index,
            requested.0,
            dataset.data_bytes.saturating_mul(2),
            dataset.data_bytes
        ));
    }
    let repo_name = status.backup_repo_name.unwrap_or_default();
    if let Some(r) = repo
        && r.spec.storage_provider_ref == "pvc"
        && req.backup_namespace != cluster_ns
    {
        return Err(format!(
            "BackupRepo {} keeps {what} on a volume in namespace {}, which a Cluster in namespace \
             {cluster_ns} cannot mount: restore into namespace {}, or back up to an S3 repo",
            r.name_any(),
            req.backup_namespace,
            req.backup_namespace
        ));
    }
    match repo {
        None => Err(format!("BackupRepo {repo_name:?} of {what} does not exist")),
        Some(r) => {
            crate::repo::namespaces::allows(r, cluster_ns)?;
            let st = r.status.clone().unwrap_or_default();
            if st.phase == Some(BackupRepoPhase::Ready) {
                Ok(())
            } else {
                Err(format!(
                    "BackupRepo {} of {what} is not Ready ({}): {}",
                    r.name_any(),
                    st.phase
                        .map(|p| format!("{p:?}"))
                        .unwrap_or_else(|| "unchecked".into()),
                    st.message.unwrap_or_default()
                ))
            }
        }
    }
}

/// Bytes in a storage quantity, in Kubernetes' notation: a number with a binary suffix (`1Gi`,
/// `500Mi`), a decimal one (`2G`, `500M`, `1500m`), an exponent (`1e9`) or none at all
/// (`1073741824`). `None` for anything else, and for negative sizes. Fractions of a byte are
/// rounded up, as Kubernetes does for storage.
pub fn quantity_bytes(q: &Quantity) -> Option<i64> {
    let s = q.0.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    // Digits on at least one side of at most one point, as `1`, `1.5`, `.5` and `1.`.
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        exp => {
            let e = exp.strip_prefix(['e', 'E'])?;
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            10f64.powi(e.parse().ok()?)
        }
    };
    let bytes = (n * mult).ceil();
    // A size past i64 cannot be requested; saturating would make it look satisfiable.
    (bytes.is_finite() && bytes < i64::MAX as f64).then_some(bytes as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::field_report_cluster;
    use crate::cluster::validate::validate;
    use lifeboat_api::dataprotection::v1alpha1::{
        BackupDataset, BackupRepoSpec, BackupRepoStatus, BackupSpec, BackupStatus,
        DatasetFingerprint, VolumeClaimRestorePolicy,
    };
    use std::time::Duration;

    fn req(ns: &str) -> ComponentRestore {
        ComponentRestore {
            component: "falkordb".into(),
            backup_name: "b".into(),
            backup_namespace: ns.into(),
            policy: VolumeClaimRestorePolicy::Parallel,
            env: vec![],
            prepare_data_deadline: Duration::from_secs(60),
            post_ready_deadline: Duration::from_secs(60),
            deadlines_given: false,
        }
    }

    fn backup(phase: BackupPhase, bytes: i64) -> Backup {
        let mut b = Backup::new("b", BackupSpec::default());
        b.metadata.namespace = Some("demo".into());
        b.status = Some(BackupStatus {
            phase: Some(phase),
            backup_repo_name: Some("repo".into()),
            dataset: Some(BackupDataset {
                engine: "falkordb".into(),
                topology: Some("replication".into()),
                component: "falkordb".into(),
                manifest_path: "p".into(),
                manifest_format_version: 1,
                data_bytes: bytes,
                fingerprint: DatasetFingerprint::default(),
            }),
            ..Default::default()
        });
        b
    }

    fn repo(phase: BackupRepoPhase) -> BackupRepo {
        let mut r = BackupRepo::new("repo", BackupRepoSpec::default());
        r.status = Some(BackupRepoStatus {
            phase: Some(phase),
            message: Some("dial tcp: connection refused".into()),
            ..Default::default()
        });
        r
    }

    fn run(
        r: &ComponentRestore,
        b: Option<&Backup>,
        repo: Option<&BackupRepo>,
    ) -> Result<(), String> {
        let c = field_report_cluster();
        check(r, "demo", &validate(&c).expect("valid"), b, repo)
    }

    #[test]
    fn a_completed_backup_in_a_ready_repo_passes() {
        let b = backup(BackupPhase::Completed, 1000);
        assert_eq!(
            run(&req("demo"), Some(&b), Some(&repo(BackupRepoPhase::Ready))),
            Ok(())
        );
    }

    #[test]
    fn a_repo_that_does_not_serve_the_clusters_namespace_refuses_the_restore() {
        let b = backup(BackupPhase::Completed, 1000);
        let mut r = repo(BackupRepoPhase::Ready);
        r.metadata.annotations = Some(
            [(
                crate::repo::namespaces::ALLOWED_NAMESPACES.to_owned(),
                "prod".to_owned(),
            )]
            .into(),
        );
        let e = run(&req("demo"), Some(&b), Some(&r)).expect_err("not served");
        assert!(e.contains("does not serve namespace"), "{e}");
    }

    #[test]
    fn each_failed_precondition_names_its_object() {
        let ready = repo(BackupRepoPhase::Ready);
        let e = run(&req("demo"), None, Some(&ready)).expect_err("missing");
        assert!(e.contains("Backup demo/b does not exist"), "{e}");
        let e = run(
            &req("demo"),
            Some(&backup(BackupPhase::Running, 1)),
            Some(&ready),
        )
        .expect_err("running");
        assert!(e.contains("is Running, not Completed"), "{e}");
        let e = run(
            &req("demo"),
            Some(&backup(BackupPhase::Completed, 1 << 30)),
            Some(&ready),
        )
        .expect_err("too big");
        assert!(e.contains("volumeClaimTemplates[data] requests 1Gi"), "{e}");
        let e = run(
            &req("demo"),
            Some(&backup(BackupPhase::Completed, 1)),
            Some(&repo(BackupRepoPhase::Failed)),
        )
        .expect_err("repo");
        assert!(
            e.contains("BackupRepo repo") && e.contains("connection refused"),
            "{e}"
        );
        let e =
            run(&req("demo"), Some(&backup(BackupPhase::Completed, 1)), None).expect_err("no repo");
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn cross_namespace_needs_a_grant() {
        let ready = repo(BackupRepoPhase::Ready);
        let mut b = backup(BackupPhase::Completed, 1);
        b.metadata.namespace = Some("prod".into());
        let e = run(&req("prod"), Some(&b), Some(&ready)).expect_err("no grant");
        assert!(e.contains(RESTORE_GRANT), "{e}");
        b.annotations_mut()
            .insert(RESTORE_GRANT.into(), "staging, demo".into());
        assert_eq!(run(&req("prod"), Some(&b), Some(&ready)), Ok(()));
    }

    #[test]
    fn a_pvc_repo_cannot_serve_another_namespace() {
        let mut r = repo(BackupRepoPhase::Ready);
        r.spec.storage_provider_ref = "pvc".into();
        let mut b = backup(BackupPhase::Completed, 1);
        b.metadata.namespace = Some("prod".into());
        b.annotations_mut()
            .insert(RESTORE_GRANT.into(), "demo".into());
        let e = run(&req("prod"), Some(&b), Some(&r)).expect_err("pvc across namespaces");
        assert!(e.contains("cannot mount") && e.contains("S3"), "{e}");
        assert_eq!(
            run(
                &req("demo"),
                Some(&backup(BackupPhase::Completed, 1)),
                Some(&r)
            ),
            Ok(())
        );
    }

    #[test]
    fn engine_mismatch_fails() {
        let mut b = backup(BackupPhase::Completed, 1);
        if let Some(d) = b.status.as_mut().and_then(|s| s.dataset.as_mut()) {
            d.engine = "redis".into();
        }
        let e =
            run(&req("demo"), Some(&b), Some(&repo(BackupRepoPhase::Ready))).expect_err("engine");
        assert!(e.contains("holds a redis dataset"), "{e}");
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity_bytes(&Quantity("1Gi".into())), Some(1 << 30));
        assert_eq!(quantity_bytes(&Quantity("500M".into())), Some(500_000_000));
        assert_eq!(quantity_bytes(&Quantity("lots".into())), None);
        // Kubernetes' other notations: no suffix, exponents, milli, the large suffixes.
        assert_eq!(
            quantity_bytes(&Quantity("1073741824".into())),
            Some(1 << 30)
        );
        assert_eq!(quantity_bytes(&Quantity("1e9".into())), Some(1_000_000_000));
        assert_eq!(quantity_bytes(&Quantity("1.5Gi".into())), Some(3 << 29));
        assert_eq!(quantity_bytes(&Quantity("1500m".into())), Some(2));
        assert_eq!(quantity_bytes(&Quantity("1Pi".into())), Some(1 << 50));
        assert_eq!(quantity_bytes(&Quantity("+2k".into())), Some(2000));
        for bad in [
            "", "Gi", ".", "1.2.3Gi", "-1Gi", "1Gib", "1e", "1e99999", "9Ei",
        ] {
            assert_eq!(quantity_bytes(&Quantity(bad.into())), None, "{bad:?}");
        }
    }
}
