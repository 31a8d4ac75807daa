//! The objects a restore creates: the Restore itself, the data PVCs, the prepareData Jobs and
//! the verify Job. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{
    BackupRef, PrepareDataConfig, RestoreDeadlines, RestoreObjectMeta, RestoreSpec,
    RestoreVolumeClaim,
};
use lifeboat_api::{Cluster, Restore, labels};

use super::intent::ComponentRestore;
use crate::cluster::build::{DATA_DIR, password_env, selector_labels};
use crate::cluster::validate::ValidComponent;
use crate::naming;
use crate::repo::access::RepoAccess;

/// Label on restore Jobs and PVCs naming the Restore they belong to.
pub const RESTORE_LABEL: &str = "lifeboat.io/restore";

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The Restore object of a component's restore, owned by the Cluster.
pub fn restore_object(cluster: &Cluster, comp: &ValidComponent, req: &ComponentRestore) -> Restore {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let template = comp
        .spec
        .volume_claim_templates
        .iter()
        .find(|t| t.name == "data")
        .and_then(|t| t.spec.clone());
    let claims = (0..comp.spec.replicas)
        .map(|i| RestoreVolumeClaim {
            metadata: RestoreObjectMeta {
                name: naming::data_pvc(&name, &comp.spec.name, i),
                namespace: Some(ns.clone()),
                labels: BTreeMap::new(),
            },
            volume_claim_spec: template.clone(),
            volume_source: Some("data".into()),
            mount_path: Some(DATA_DIR.into()),
        })
        .collect();
    let mut r = Restore::new(
        &naming::restore(&name, &comp.spec.name),
        RestoreSpec {
            backup: BackupRef {
                name: req.backup_name.clone(),
                namespace: req.backup_namespace.clone(),
                source_target_name: None,
            },
            env: req.env.clone(),
            prepare_data_config: Some(PrepareDataConfig {
                volume_claims: claims,
                volume_claim_restore_policy: req.policy,
                ..Default::default()
            }),
            backoff_limit: Some(2),
            deadlines: Some(RestoreDeadlines {
                prepare_data: Some(crate::duration::format(req.prepare_data_deadline)),
                post_ready: Some(crate::duration::format(req.post_ready_deadline)),
            }),
            ..Default::default()
        },
    );
    r.metadata.namespace = Some(ns);
    r.metadata.labels = Some(selector_labels(&name, &comp.spec.name, None));
    r.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
    r
}

/// A data PVC, under the name the StatefulSet will use, so the workload adopts the restored
/// volume instead of provisioning an empty one. The Cluster owns it (not as controller, so the
/// StatefulSet may claim it too).
pub fn data_pvc(cluster: &Cluster, comp: &ValidComponent, ordinal: i32) -> PersistentVolumeClaim {
    let name = cluster.name_any();
    let template = comp
        .spec
        .volume_claim_templates
        .iter()
        .find(|t| t.name == "data");
    let mut labels = selector_labels(&name, &comp.spec.name, None);
    labels.insert(
        RESTORE_LABEL.into(),
        naming::restore(&name, &comp.spec.name),
    );
    // Like the claims the StatefulSet creates: what lets termination prove the volume is this
    // Cluster's even without the owner reference.
    if let Some(uid) = cluster.uid() {
        labels.insert(labels::CLUSTER_UID.into(), uid);
    }
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(naming::data_pvc(&name, &comp.spec.name, ordinal)),
            namespace: cluster.namespace(),
            labels: Some(labels),
            owner_references: cluster.controller_owner_ref(&()).map(|mut o| {
                o.controller = Some(false);
                vec![o]
            }),
            ..Default::default()
        },
        spec: template.and_then(|t| t.spec.clone()),
        ..Default::default()
    }
}

/// Shared shape of the restore Jobs.
pub struct JobInput<'a> {
    pub cluster: &'a Cluster,
    pub comp: &'a ValidComponent,
    pub req: &'a ComponentRestore,
    /// The Restore that owns the Jobs.
    pub owner: Option<OwnerReference>,
    pub image: &'a str,
    pub repo: &'a RepoAccess,
    /// The backup's name inside the repo.
    pub backup_path: &'a str,
    /// Requests and limits of the Jobs' container.
    pub resources: &'a ResourceRequirements,
    /// The user and pull secrets of the Jobs' pods.
    pub pods: &'a crate::security::PodSettings,
}

fn job(
    input: &JobInput<'_>,
    name: String,
    deadline_secs: u64,
    container: Container,
    volumes: Vec<Volume>,
) -> Job {
    let cluster = input.cluster.name_any();
    // Not the component's selector labels: the Services and the role observer select the
    // database pods by those, and a Job pod must never be taken for one.
    let labels: BTreeMap<String, String> = [
        (labels::INSTANCE.to_owned(), cluster.clone()),
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
        (
            RESTORE_LABEL.to_owned(),
            naming::restore(&cluster, &input.comp.spec.name),
        ),
    ]
    .into();
    Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: input.cluster.namespace(),
            labels: Some(labels.clone()),
            owner_references: input.owner.clone().map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            // A minute past the stage deadline: the stage fails first, quoting why the pod is
            // stuck; this only stops a Job the operator is no longer watching.
            active_deadline_seconds: Some(
                i64::try_from(deadline_secs.saturating_add(60)).unwrap_or(i64::MAX),
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(crate::security::restricted(
                    PodSpec {
                        restart_policy: Some("Never".into()),
                        enable_service_links: Some(false),
                        containers: vec![container],
                        volumes: Some(volumes),
                        ..Default::default()
                    },
                    input.pods,
                )),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The prepareData Job that writes the backup into one data PVC.
pub fn prepare_data_job(input: &JobInput<'_>, ordinal: i32) -> Job {
    let cluster = input.cluster.name_any();
    let pvc = naming::data_pvc(&cluster, &input.comp.spec.name, ordinal);
    let mut env_vars = input.repo.env.clone();
    env_vars.push(env("LIFEBOAT_BACKUP_NAME", input.backup_path));
    env_vars.push(env("LIFEBOAT_TARGET_DIR", DATA_DIR));
    env_vars.push(env("LIFEBOAT_LOG_FORMAT", "json"));
    env_vars.extend(input.req.env.iter().cloned());
    let mut mounts = vec![VolumeMount {
        name: "data".into(),
        mount_path: DATA_DIR.into(),
        ..Default::default()
    }];
    mounts.extend(input.repo.mounts.iter().cloned());
    let mut volumes = vec![Volume {
        name: "data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc,
            read_only: Some(false),
        }),
        ..Default::default()
    }];
    volumes.extend(input.repo.volumes.iter().cloned());
    let container = Container {
        name: "restore".into(),
        image: Some(input.image.to_owned()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["lifeboat-mover".into(), "restore".into()]),
        env: Some(env_vars),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        resources: Some(input.resources.clone()),
        ..Default::default()
    };
    job(
        input,
        naming::prepare_data_job(&cluster, &input.comp.spec.name, ordinal),
        input.req.prepare_data_deadline.as_secs(),
        container,
        volumes,
    )
}

/// The postReady Job that compares every restored server's live dataset with the manifest.
pub fn verify_job(input: &JobInput<'_>, secret: &str, domain: &str) -> Job {
    let cluster = input.cluster.name_any();
    let ns = input.cluster.namespace().unwrap_or_default();
    let hosts: Vec<String> = (0..input.comp.spec.replicas)
        .map(|i| naming::pod_fqdn(&cluster, &input.comp.spec.name, i, &ns, domain))
        .collect();
    let mut env_vars = input.repo.env.clone();
    env_vars.push(env("LIFEBOAT_BACKUP_NAME", input.backup_path));
    env_vars.push(env("LIFEBOAT_LOG_FORMAT", "json"));
    env_vars.push(env("LIFEBOAT_VERIFY_HOSTS", hosts.join(" ")));
    env_vars.push(password_env(secret, "LIFEBOAT_REDIS_PASSWORD"));
    // The live fingerprint comes from each pod's instance manager, which alone may run the
    // DEBUG DIGEST-VALUE the content digest needs (over loopback).
    env_vars.push(env(
        "LIFEBOAT_MANAGER_PORT",
        crate::engine::replication::MANAGER_PORT.to_string(),
    ));
    // Each server is verified on its own, all at once (`LIFEBOAT_VERIFY_HOSTS`): a replica that
    // has not synced, or a primary that lost keys, both fail the restore, and each digest is
    // computed in its own pod.
    let container = Container {
        name: "verify".into(),
        image: Some(input.image.to_owned()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["lifeboat-mover".into(), "verify".into()]),
        // The Job starts while the servers may still be loading, and waits for them within the
        // stage's deadline rather than the mover's default.
        args: Some(vec![
            "--timeout".into(),
            input.req.post_ready_deadline.as_secs().to_string(),
        ]),
        env: Some(env_vars),
        volume_mounts: Some(input.repo.mounts.clone()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        resources: Some(input.resources.clone()),
        ..Default::default()
    };
    let mut j = job(
        input,
        naming::verify_job(&cluster, &input.comp.spec.name),
        input.req.post_ready_deadline.as_secs(),
        container,
        input.repo.volumes.clone(),
    );
    // A mismatch is a verdict, not a flake: retrying cannot change the data.
    if let Some(s) = j.spec.as_mut() {
        s.backoff_limit = Some(0);
    }
    j
}

/// The label selector of a Cluster's restore Jobs.
pub fn job_selector(cluster: &str, component: &str) -> String {
    format!(
        "{}={cluster},{RESTORE_LABEL}={}",
        labels::INSTANCE,
        naming::restore(cluster, component)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::claims::{self, ClusterIdentity, Proof, Verdict};
    use crate::cluster::test_support::field_report_cluster;
    use crate::cluster::validate::validate;

    fn restore_jobs(repo: &RepoAccess) -> Vec<Job> {
        let c = field_report_cluster();
        let v = validate(&c).expect("valid");
        let comp = v.data().expect("data");
        let req = ComponentRestore {
            component: comp.spec.name.clone(),
            backup_name: "b".into(),
            backup_namespace: "ns".into(),
            policy: Default::default(),
            env: Vec::new(),
            prepare_data_deadline: std::time::Duration::from_secs(900),
            post_ready_deadline: std::time::Duration::from_secs(600),
            deadlines_given: false,
        };
        let resources = crate::job_resources::default_resources();
        let input = JobInput {
            cluster: &c,
            comp,
            req: &req,
            owner: None,
            image: "mover",
            repo,
            backup_path: "b-1234",
            resources: &resources,
            pods: &crate::security::PodSettings::default(),
        };
        vec![
            prepare_data_job(&input, 0),
            verify_job(&input, "secret", "cluster.local"),
        ]
    }

    fn s3_access() -> RepoAccess {
        let repo: lifeboat_api::BackupRepo = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "BackupRepo",
            "metadata": {"name": "s3"},
            "spec": {"storageProviderRef": "s3", "pvReclaimPolicy": "Retain",
                "config": {"bucket": "b", "endpoint": "http://e", "region": "r"},
                "credential": {"name": "cred", "namespace": "ns"}}
        }))
        .expect("repo");
        crate::repo::access::access(&repo, "ns").expect("access")
    }

    #[test]
    fn restore_jobs_are_restricted_bounded_and_set_only_reserved_variables() {
        for job in restore_jobs(&s3_access()) {
            let pod = job.spec.and_then(|s| s.template.spec).expect("pod spec");
            assert_eq!(
                crate::security::restricted_violations(&pod),
                Vec::<String>::new()
            );
            let c = &pod.containers[0];
            assert_eq!(
                c.resources.as_ref(),
                Some(&crate::job_resources::default_resources())
            );
            // A user variable can never shadow one of these: each is refused by name.
            for e in c.env.iter().flatten() {
                assert!(
                    crate::mover_env::is_reserved(&e.name),
                    "{} is not reserved",
                    e.name
                );
            }
        }
    }

    #[test]
    fn the_verify_job_waits_for_the_servers_as_long_as_the_stage_may_last() {
        let jobs = restore_jobs(&s3_access());
        let verify = jobs
            .last()
            .and_then(|j| j.spec.as_ref())
            .expect("verify job");
        let deadline = verify.active_deadline_seconds.expect("deadline");
        let c = verify
            .template
            .spec
            .as_ref()
            .map(|p| p.containers[0].clone())
            .expect("container");
        // The Job outlives the stage by a minute, so that the stage fails first, quoting why.
        assert_eq!(
            c.args,
            Some(vec!["--timeout".to_owned(), (deadline - 60).to_string()])
        );
    }

    #[test]
    fn restored_volumes_are_provably_the_clusters() {
        let c = field_report_cluster();
        let v = validate(&c).expect("valid");
        let pvc = data_pvc(&c, v.data().expect("data"), 1);
        let id = ClusterIdentity::of(&c);
        assert_eq!(
            pvc.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::CLUSTER_UID)),
            c.metadata.uid.as_ref()
        );
        assert_eq!(
            claims::verdict(&id, &pvc, &Default::default()),
            Verdict::Delete(Proof::OwnerReference)
        );
        let mut unowned = pvc.clone();
        unowned.metadata.owner_references = None;
        assert_eq!(
            claims::verdict(&id, &unowned, &Default::default()),
            Verdict::Delete(Proof::NameAndUidLabel),
            "the label and the exact name suffice without the owner reference"
        );
    }
}
