//! The BackupPolicy created for each data component, from the engine's defaults, as KubeBlocks'
//! FalkorDB addon does: method `datafile`, target role `secondary` falling back to `primary`.

use k8s_openapi::api::core::v1::VolumeMount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{
    BackupMethod, BackupPolicySpec, BackupTarget, ConnectionCredential, PodSelectionStrategy,
    PodSelector, TargetVolumeInfo,
};
use lifeboat_api::{BackupPolicy, Cluster, labels};

use crate::cluster::build::{DATA_DIR, DATA_VOLUME, PASSWORD_KEY, USERNAME_KEY};
use crate::naming;

/// The one backup method Lifeboat's engines offer.
pub const DATAFILE: &str = "datafile";

fn role_selector(cluster: &str, component: &str, role: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            [
                (labels::INSTANCE.to_owned(), cluster.to_owned()),
                (labels::COMPONENT_NAME.to_owned(), component.to_owned()),
                (labels::ROLE.to_owned(), role.to_owned()),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The default BackupPolicy of a Cluster's data component.
pub fn default_policy(
    cluster: &Cluster,
    component: &str,
    secret: &str,
    repo: Option<String>,
) -> BackupPolicy {
    let name = cluster.name_any();
    let mut p = BackupPolicy::new(
        &naming::backup_policy(&name, component),
        BackupPolicySpec {
            backup_repo_name: repo,
            path_prefix: None,
            backoff_limit: 2,
            target: Some(BackupTarget {
                name: Some(component.to_owned()),
                pod_selector: Some(PodSelector {
                    label_selector: role_selector(&name, component, "secondary"),
                    fallback_label_selector: Some(role_selector(&name, component, "primary")),
                    strategy: Some(PodSelectionStrategy::Any),
                }),
                connection_credential: Some(ConnectionCredential {
                    secret_name: secret.to_owned(),
                    username_key: Some(USERNAME_KEY.into()),
                    password_key: Some(PASSWORD_KEY.into()),
                    host_key: None,
                    port_key: None,
                }),
                container_port: None,
                service_account_name: None,
            }),
            targets: None,
            backup_methods: vec![BackupMethod {
                name: DATAFILE.into(),
                snapshot_volumes: Some(false),
                action_set_name: None,
                target_volumes: Some(TargetVolumeInfo {
                    volumes: vec![DATA_VOLUME.into()],
                    volume_mounts: vec![VolumeMount {
                        name: DATA_VOLUME.into(),
                        mount_path: DATA_DIR.into(),
                        ..Default::default()
                    }],
                }),
                env: vec![],
                runtime_settings: None,
            }],
        },
    );
    p.metadata.namespace = cluster.namespace();
    let mut l = crate::cluster::build::selector_labels(&name, component, None);
    l.remove(labels::MANAGED_BY);
    l.insert(labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into());
    p.metadata.labels = Some(l);
    p.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
    p
}

/// The Cluster and component a BackupPolicy's target selects (its pod selector's instance and
/// component labels); empty where the selector does not say.
pub fn target_of(policy: &BackupPolicy) -> (String, String) {
    let selector = policy
        .spec
        .target
        .as_ref()
        .and_then(|t| t.pod_selector.as_ref())
        .and_then(|s| s.label_selector.match_labels.as_ref());
    let get = |k: &str| selector.and_then(|l| l.get(k)).cloned().unwrap_or_default();
    (get(labels::INSTANCE), get(labels::COMPONENT_NAME))
}
