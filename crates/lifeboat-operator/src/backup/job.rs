//! The shape every Job a Backup owns shares (its delete Job, its drill Job): one mover container
//! under Pod Security `restricted`, owned by the Backup, labelled with it, bounded in time.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use lifeboat_api::{Backup, labels};

/// What differs between a Backup's Jobs.
pub struct BackupJob {
    pub name: String,
    /// The mover subcommand, also the container's name.
    pub subcommand: &'static str,
    pub env: Vec<EnvVar>,
    pub mounts: Vec<VolumeMount>,
    pub volumes: Vec<Volume>,
    pub resources: ResourceRequirements,
    pub backoff_limit: i32,
    pub deadline_seconds: i64,
    /// How long Kubernetes keeps the finished Job (and its pod's volumes) before removing it;
    /// kept until the Backup goes when `None`.
    pub ttl_after_finished: Option<i32>,
    /// Labels besides the two every such Job carries.
    pub extra_labels: BTreeMap<String, String>,
}

/// The Job `j` of Backup `b`.
pub fn build(b: &Backup, j: BackupJob, cfg: &crate::context::Config) -> Job {
    let mut labels_map = BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
        ("lifeboat.io/backup".to_owned(), b.name_any()),
    ]);
    labels_map.extend(j.extra_labels);
    Job {
        metadata: ObjectMeta {
            name: Some(j.name),
            namespace: b.namespace(),
            labels: Some(labels_map.clone()),
            owner_references: b.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(j.backoff_limit),
            active_deadline_seconds: Some(j.deadline_seconds),
            ttl_seconds_after_finished: j.ttl_after_finished,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels_map),
                    ..Default::default()
                }),
                spec: Some(crate::security::restricted(
                    PodSpec {
                        restart_policy: Some("Never".into()),
                        enable_service_links: Some(false),
                        containers: vec![Container {
                            name: j.subcommand.into(),
                            image: Some(cfg.mover_image.clone()),
                            image_pull_policy: Some("IfNotPresent".into()),
                            command: Some(vec!["lifeboat-mover".into(), j.subcommand.into()]),
                            env: Some(j.env),
                            volume_mounts: Some(j.mounts),
                            termination_message_policy: Some("FallbackToLogsOnError".into()),
                            resources: Some(j.resources),
                            ..Default::default()
                        }],
                        volumes: Some(j.volumes),
                        ..Default::default()
                    },
                    &cfg.pods,
                )),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}
