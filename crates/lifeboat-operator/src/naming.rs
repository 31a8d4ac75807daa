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
