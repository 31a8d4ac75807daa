//! Deterministic object names. An operator restarted at any moment finds the objects it made by
//! these names instead of making them again.

/// The StatefulSet of a component, and the prefix of its pods.
pub fn workload(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}")
}

/// The headless Service that gives each pod a stable DNS name.
pub fn headless_service(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-headless")
}

/// The client Service; for the data component of a replication topology it selects the primary.
pub fn client_service(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}")
}

/// The ConfigMap holding a component's server configuration.
pub fn config_map(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-config")
}

/// The Secret holding the `default` account's password (KubeBlocks' name).
pub fn account_secret(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-account-default")
}

/// A pod of a component.
pub fn pod(cluster: &str, component: &str, ordinal: i32) -> String {
    format!("{cluster}-{component}-{ordinal}")
}

/// The data PVC of a pod: the name the StatefulSet's `data` volume claim template gives it.
pub fn data_pvc(cluster: &str, component: &str, ordinal: i32) -> String {
    format!("data-{cluster}-{component}-{ordinal}")
}

/// The Restore object of a restored component.
pub fn restore(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-restore")
}

/// The prepareData Job writing one volume.
pub fn prepare_data_job(cluster: &str, component: &str, ordinal: i32) -> String {
    format!("{cluster}-{component}-prepare-{ordinal}")
}

/// The postReady Job verifying the restored data.
pub fn verify_job(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-verify")
}

/// The BackupPolicy Lifeboat creates for a data component (KubeBlocks' name).
pub fn backup_policy(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-backup-policy")
}

/// The Job taking a Backup.
pub fn backup_job(backup: &str) -> String {
    format!("{backup}-backup")
}

/// The Job drilling a Backup: restoring it into a scratch server to prove it restorable.
pub fn drill_job(backup: &str) -> String {
    format!("{backup}-drill")
}

/// The PVC a `pvc` BackupRepo uses in a namespace.
pub fn repo_pvc(repo: &str) -> String {
    format!("lifeboat-repo-{repo}")
}

/// The copy of a repo's credential Secret in a namespace that uses the repo.
pub fn repo_credential(repo: &str) -> String {
    format!("lifeboat-repo-{repo}-credential")
}

/// The fully qualified DNS name of a pod behind its headless Service.
pub fn pod_fqdn(cluster: &str, component: &str, ordinal: i32, ns: &str, domain: &str) -> String {
    format!(
        "{}.{}.{ns}.svc.{domain}",
        pod(cluster, component, ordinal),
        headless_service(cluster, component)
    )
}

/// The BackupSchedule Lifeboat keeps for a data component of a Cluster with `spec.backup`
/// (KubeBlocks' name).
pub fn backup_schedule(cluster: &str, component: &str) -> String {
    format!("{cluster}-{component}-backup-schedule")
}

/// The longest Backup name whose Job name (`<backup>-backup`) still fits in 63 characters.
const BACKUP_NAME_MAX: usize = 63 - "-backup".len();

/// The Backup a schedule takes for its run at `time`: `<cluster>-<schedule>-<YYYYMMDDHHMMSS>`
/// in UTC, as KubeBlocks names them. A prefix too long for the Job's name is cut and ends in a
/// hash of the whole, so two long prefixes do not meet.
pub fn scheduled_backup(cluster: &str, schedule: &str, time: jiff::Timestamp) -> String {
    let stamp = time.strftime("%Y%m%d%H%M%S").to_string();
    let prefix = format!("{cluster}-{schedule}");
    let room = BACKUP_NAME_MAX - stamp.len() - 1;
    let prefix = if prefix.len() <= room {
        prefix
    } else {
        use sha2::Digest;
        let hash = hex::encode(sha2::Sha256::digest(prefix.as_bytes()));
        let keep = room - 6;
        let cut = prefix
            .get(..keep)
            .unwrap_or(&prefix)
            .trim_end_matches(['-', '.']);
        format!("{cut}-{}", hash.get(..5).unwrap_or("00000"))
    };
    format!("{prefix}-{stamp}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_backups_are_named_as_kubeblocks_names_them_and_fit_their_job() {
        let t: jiff::Timestamp = "2026-12-05T18:00:00Z".parse().expect("a timestamp");
        assert_eq!(
            scheduled_backup("fdb", "datafile", t),
            "fdb-datafile-20261205180000"
        );
        let long = scheduled_backup(&"c".repeat(40), "datafile", t);
        assert!(backup_job(&long).len() <= 63, "{long}");
        assert!(long.ends_with("-20261205180000"), "{long}");
        let other = scheduled_backup(&"c".repeat(40), "hourly", t);
        assert_ne!(long, other);
    }
}
