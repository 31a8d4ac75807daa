//! Builds the objects a Cluster's components need. Pure: the same Cluster gives the same objects.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PersistentVolumeClaim,
    PodAffinityTerm, PodAntiAffinity, PodReadinessGate, PodSpec, PodTemplateSpec, Probe, Secret,
    SecretKeySelector, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use lifeboat_api::Cluster;
use lifeboat_api::apps::v1::TerminationPolicy;
use lifeboat_api::labels;
use sha2::{Digest, Sha256};

use super::validate::{ValidCluster, ValidComponent};
use crate::engine::replication::{CONFIG_DIR, MANAGER_DIR, MANAGER_PORT};
use crate::engine::{ComponentKind, ConfigContext};
use crate::naming;

/// The key of the password in the account Secret (KubeBlocks' key).
pub const PASSWORD_KEY: &str = "password";
/// The key of the user name in the account Secret.
pub const USERNAME_KEY: &str = "username";
/// The data volume's name.
pub const DATA_VOLUME: &str = "data";
/// Where the data volume is mounted.
pub const DATA_DIR: &str = "/data";

/// Everything needed to build a Cluster's objects.
pub struct BuildInput<'a> {
    pub cluster: &'a Cluster,
    pub valid: &'a ValidCluster,
    /// The database image.
    pub image: &'a str,
    /// The image holding the instance manager (the mover image), copied into each pod by an init
    /// container so that any database image can run under it.
    pub manager_image: &'a str,
    /// The cluster DNS domain.
    pub domain: &'a str,
    /// Whether the data pods wait for restore verification (a readiness gate).
    pub restore_gate: bool,
    /// The user and pull secrets of the pods.
    pub pods: &'a crate::security::PodSettings,
}

impl BuildInput<'_> {
    fn name(&self) -> String {
        self.cluster.name_any()
    }

    fn ns(&self) -> String {
        self.cluster.namespace().unwrap_or_default()
    }

    fn owner(&self) -> Option<OwnerReference> {
        self.cluster.controller_owner_ref(&())
    }

    fn meta(&self, name: String, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.ns()),
            labels: Some(selector_labels(
                &self.name(),
                component,
                Some(self.valid.engine.cluster_def()),
            )),
            owner_references: self.owner().map(|o| vec![o]),
            ..Default::default()
        }
    }

    fn data_component(&self) -> Option<&ValidComponent> {
        self.valid.data()
    }

    /// The account Secret shared by the data and sentinel components: sentinels authenticate to
    /// the data servers with it.
    pub fn secret_name(&self) -> String {
        let comp = self
            .data_component()
            .map(|c| c.spec.name.as_str())
            .unwrap_or("data");
        naming::account_secret(&self.name(), comp)
    }
}

/// The labels that select a component's pods.
pub fn selector_labels(
    cluster: &str,
    component: &str,
    def: Option<&str>,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        (labels::INSTANCE.to_owned(), cluster.to_owned()),
        (labels::COMPONENT_NAME.to_owned(), component.to_owned()),
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
    ]);
    if let Some(d) = def {
        l.insert("app.kubernetes.io/name".into(), d.to_owned());
    }
    l
}

fn pod_selector(cluster: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::INSTANCE.to_owned(), cluster.to_owned()),
        (labels::COMPONENT_NAME.to_owned(), component.to_owned()),
    ])
}

/// The account Secret with a new random password. Created once, never re-applied: a second
/// password would lock the servers out.
pub fn account_secret(input: &BuildInput<'_>, password: String) -> Secret {
    let comp = input
        .data_component()
        .map(|c| c.spec.name.clone())
        .unwrap_or_default();
    Secret {
        metadata: input.meta(input.secret_name(), &comp),
        string_data: Some(BTreeMap::from([
            (USERNAME_KEY.to_owned(), "default".to_owned()),
            (PASSWORD_KEY.to_owned(), password),
        ])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// A new random password.
pub fn generate_password() -> String {
    use rand::Rng;
    use rand::distr::Alphanumeric;
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// The ConfigMap with a component's configuration and start scripts.
pub fn config_map(input: &BuildInput<'_>, comp: &ValidComponent) -> ConfigMap {
    let ctx = ConfigContext {
        cluster: &input.cluster.name_any(),
        namespace: &input.ns(),
        topology: &input.valid.topology,
        replicas: input
            .valid
            .components
            .iter()
            .map(|c| (c.spec.name.clone(), c.spec.replicas))
            .collect(),
    };
    let mut data = input.valid.engine.config_files(&ctx);
    if input.valid.sentinel().is_some() {
        data.insert(MEMBERS_FILE.to_owned(), members(input));
    }
    ConfigMap {
        metadata: input.meta(
            naming::config_map(&input.name(), &comp.spec.name),
            &comp.spec.name,
        ),
        data: Some(data),
        ..Default::default()
    }
}

/// The members file the instance managers read at each decision: every data pod and sentinel by
/// DNS name, the sentinels' quorum and master name.
pub const MEMBERS_FILE: &str = "members.json";

fn members(input: &BuildInput<'_>) -> String {
    let name = input.name();
    let ns = input.ns();
    let fqdns = |comp: Option<&ValidComponent>| -> Vec<String> {
        comp.map(|c| {
            (0..c.spec.replicas)
                .map(|i| naming::pod_fqdn(&name, &c.spec.name, i, &ns, input.domain))
                .collect()
        })
        .unwrap_or_default()
    };
    let sentinels = fqdns(input.valid.sentinel());
    serde_json::json!({
        "data": fqdns(input.data_component()),
        "quorum": sentinels.len() / 2 + 1,
        "sentinels": sentinels,
        "masterName": input.valid.engine.master_name(&name),
    })
    .to_string()
}

/// The hash of the config the servers read at start. The members file is left out: it changes
/// with scaling, and the managers re-read it, so a scale needs no rolling restart.
fn config_hash(cm: &ConfigMap) -> String {
    let mut h = Sha256::new();
    for (k, v) in cm
        .data
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != MEMBERS_FILE)
    {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(v.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

/// The headless Service giving each pod a DNS name. It publishes pods that are not Ready: the
/// servers must find each other while restored pods are still held un-Ready.
pub fn headless_service(input: &BuildInput<'_>, comp: &ValidComponent) -> Service {
    let name = input.name();
    Service {
        metadata: input.meta(
            naming::headless_service(&name, &comp.spec.name),
            &comp.spec.name,
        ),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(pod_selector(&name, &comp.spec.name)),
            ports: Some(vec![service_port(comp)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The client Service. For the data component of a replicated cluster it selects the primary
/// only, through the role label the operator keeps current.
pub fn client_service(input: &BuildInput<'_>, comp: &ValidComponent) -> Service {
    let name = input.name();
    let mut selector = pod_selector(&name, &comp.spec.name);
    if comp.def.kind == ComponentKind::Data && input.valid.sentinel().is_some() {
        selector.insert(labels::ROLE.into(), "primary".into());
    }
    Service {
        metadata: input.meta(
            naming::client_service(&name, &comp.spec.name),
            &comp.spec.name,
        ),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![service_port(comp)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn service_port(comp: &ValidComponent) -> ServicePort {
    let name = match comp.def.kind {
        ComponentKind::Data => "redis",
        ComponentKind::Sentinel => "sentinel",
    };
    ServicePort {
        name: Some(name.into()),
        port: comp.def.port,
        target_port: Some(IntOrString::String(name.into())),
        ..Default::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The password as an environment variable from the account Secret.
pub fn password_env(secret: &str, var: &str) -> EnvVar {
    EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: PASSWORD_KEY.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A probe of the instance manager's endpoint: it answers from what it observes of its server
/// (for a replica, whether its link to the primary is up), so no password appears in a probe.
fn manager_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(MANAGER_PORT),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(3),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

/// Data pods prefer nodes without another pod of their component, and so do sentinels: losing a
/// node then loses one member, not the quorum or every copy.
fn spread(cluster: &str, component: &str) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_labels: Some(pod_selector(cluster, component)),
                            ..Default::default()
                        }),
                        topology_key: "kubernetes.io/hostname".into(),
                        ..Default::default()
                    },
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The volume holding the instance manager and its private run directory.
const MANAGER_VOLUME: &str = "lifeboat";

fn manager_mount() -> VolumeMount {
    VolumeMount {
        name: MANAGER_VOLUME.into(),
        mount_path: MANAGER_DIR.into(),
        ..Default::default()
    }
}

/// The StatefulSet of a component.
/// Annotation on each StatefulSet: the Cluster spec (JSON) it was last built from.
pub const APPLIED_SPEC: &str = "lifeboat.io/applied-spec";

/// The Cluster spec a StatefulSet was built from, if it says.
pub fn applied_spec(sts: &StatefulSet) -> Option<lifeboat_api::apps::v1::ClusterSpec> {
    sts.metadata
        .annotations
        .as_ref()?
        .get(APPLIED_SPEC)
        .and_then(|s| serde_json::from_str(s).ok())
}

pub fn statefulset(input: &BuildInput<'_>, comp: &ValidComponent) -> StatefulSet {
    let name = input.name();
    let c = &comp.spec.name;
    let engine = input.valid.engine;
    let cm = config_map(input, comp);
    let policy = comp.spec.scheduling_policy.as_ref().or(input
        .cluster
        .spec
        .scheduling_policy
        .as_ref());
    let mut envs = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        env("HEADLESS_SERVICE", naming::headless_service(&name, c)),
        env("CLUSTER_DOMAIN", input.domain),
        env("SERVER_ARGS", engine.server_args().join(" ")),
        password_env(&input.secret_name(), "REDIS_PASSWORD"),
    ];
    envs.extend(comp.spec.env.iter().cloned());
    let port_name = match comp.def.kind {
        ComponentKind::Data => "redis",
        ComponentKind::Sentinel => "sentinel",
    };
    let has_data_vct = comp
        .spec
        .volume_claim_templates
        .iter()
        .any(|v| v.name == DATA_VOLUME);
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: cm.metadata.name.clone().unwrap_or_default(),
                default_mode: Some(0o644),
                ..Default::default()
            }),
            ..Default::default()
        },
        // The manager binary and the rendered config with the password: pod-local, gone with
        // the pod.
        Volume {
            name: MANAGER_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    if !has_data_vct {
        volumes.push(Volume {
            name: DATA_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
    let gated = input.restore_gate && comp.def.kind == ComponentKind::Data;
    let mut pod_labels = selector_labels(&name, c, Some(engine.cluster_def()));
    pod_labels.extend(comp.spec.labels.clone());
    let mut pod_annotations = comp.spec.annotations.clone();
    pod_annotations.insert("lifeboat.io/config-hash".into(), config_hash(&cm));
    let retention = match input.cluster.spec.termination_policy {
        TerminationPolicy::DoNotTerminate => "Retain",
        TerminationPolicy::Delete | TerminationPolicy::WipeOut => "Delete",
    };
    let mut metadata = input.meta(naming::workload(&name, c), c);
    // The spec this workload was built from: when a later edit is invalid, the operator keeps
    // following the running workload as this spec describes it (see `applied_spec`).
    if let Ok(spec) = serde_json::to_string(&input.cluster.spec) {
        metadata.annotations = Some([(APPLIED_SPEC.to_owned(), spec)].into());
    }
    StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(comp.spec.replicas),
            service_name: Some(naming::headless_service(&name, c)),
            // Parallel: replicas must be able to start while an earlier ordinal is held un-Ready
            // by the restore readiness gate.
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector {
                match_labels: Some(pod_selector(&name, c)),
                ..Default::default()
            },
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(retention.into()),
                    when_scaled: Some("Retain".into()),
                },
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(pod_annotations),
                    ..Default::default()
                }),
                spec: Some(crate::security::restricted(
                    PodSpec {
                        readiness_gates: gated.then(|| {
                            vec![PodReadinessGate {
                                condition_type: labels::READINESS_GATE_RESTORE_VERIFIED.into(),
                            }]
                        }),
                        enable_service_links: Some(false),
                        // The manager needs no Kubernetes API access.
                        automount_service_account_token: Some(false),
                        // A stopping primary hands its role over (up to ~30 s) before it shuts down.
                        termination_grace_period_seconds: Some(match comp.def.kind {
                            ComponentKind::Data => 60,
                            ComponentKind::Sentinel => 30,
                        }),
                        affinity: Some(
                            policy
                                .and_then(|p| p.affinity.clone())
                                .unwrap_or_else(|| spread(&name, c)),
                        ),
                        scheduler_name: policy.and_then(|p| p.scheduler_name.clone()),
                        node_name: policy.and_then(|p| p.node_name.clone()),
                        node_selector: policy
                            .map(|p| p.node_selector.clone())
                            .filter(|m| !m.is_empty()),
                        tolerations: policy
                            .map(|p| p.tolerations.clone())
                            .filter(|t| !t.is_empty()),
                        topology_spread_constraints: policy
                            .map(|p| p.topology_spread_constraints.clone())
                            .filter(|t| !t.is_empty()),
                        init_containers: Some(vec![Container {
                            name: "install-manager".into(),
                            image: Some(input.manager_image.to_owned()),
                            image_pull_policy: Some("IfNotPresent".into()),
                            command: Some(vec![
                                "/usr/local/bin/lifeboat-instance".into(),
                                "install".into(),
                                format!("{MANAGER_DIR}/bin"),
                            ]),
                            volume_mounts: Some(vec![manager_mount()]),
                            ..Default::default()
                        }]),
                        containers: vec![Container {
                            name: c.clone(),
                            image: Some(input.image.to_owned()),
                            image_pull_policy: Some("IfNotPresent".into()),
                            command: Some(engine.start_command(comp.def.kind)),
                            env: Some(envs),
                            ports: Some(vec![
                                ContainerPort {
                                    name: Some(port_name.into()),
                                    container_port: comp.def.port,
                                    ..Default::default()
                                },
                                ContainerPort {
                                    name: Some("manager".into()),
                                    container_port: MANAGER_PORT,
                                    ..Default::default()
                                },
                            ]),
                            // The manager answers from what it already observes, so a probe
                            // costs nothing: every 2 s, a promoted replica or a restored server
                            // joins the Services within 2 s of being ready, not 5.
                            readiness_probe: Some(manager_probe("/readyz", 2, 3)),
                            // A manager that stops answering for a minute is restarted; a server that
                            // dies takes its manager down with it, which restarts the container too.
                            liveness_probe: Some(manager_probe("/healthz", 10, 6)),
                            resources: comp.spec.resources.clone(),
                            volume_mounts: Some(vec![
                                VolumeMount {
                                    name: DATA_VOLUME.into(),
                                    mount_path: DATA_DIR.into(),
                                    ..Default::default()
                                },
                                VolumeMount {
                                    name: "config".into(),
                                    mount_path: CONFIG_DIR.into(),
                                    ..Default::default()
                                },
                                manager_mount(),
                            ]),
                            ..Default::default()
                        }],
                        volumes: Some(volumes),
                        ..Default::default()
                    },
                    input.pods,
                )),
            },
            volume_claim_templates: Some(
                comp.spec
                    .volume_claim_templates
                    .iter()
                    .map(|t| PersistentVolumeClaim {
                        metadata: ObjectMeta {
                            name: Some(t.name.clone()),
                            labels: Some({
                                let mut l = pod_selector(&name, c);
                                l.extend(t.labels.clone());
                                l.extend(claim_uid_label(input.cluster));
                                l
                            }),
                            annotations: (!t.annotations.is_empty()).then(|| t.annotations.clone()),
                            ..Default::default()
                        },
                        spec: t.spec.clone(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Cluster's UID label on the claims its StatefulSets create, which is what lets
/// termination delete them (`cluster::claims`). None for a Cluster without a UID (not yet stored).
fn claim_uid_label(c: &Cluster) -> Option<(String, String)> {
    c.uid()
        .filter(|u| !u.is_empty())
        .map(|u| (labels::CLUSTER_UID.to_owned(), u))
}

/// A StatefulSet's claim templates cannot change once it exists, and one created before the UID
/// label was added keeps templates without it; applying them with the label would be refused.
/// So `built` keeps the UID label only on templates that already carry it in `existing`; the
/// claims of older StatefulSets get the label by adoption instead (`claims::adopt`).
pub fn keep_claim_templates(built: &mut StatefulSet, existing: &StatefulSet) {
    let existing_templates = existing
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_ref());
    let labelled = |name: &Option<String>| {
        existing_templates.into_iter().flatten().any(|t| {
            t.metadata.name == *name
                && t.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(labels::CLUSTER_UID))
        })
    };
    let templates = built
        .spec
        .as_mut()
        .and_then(|s| s.volume_claim_templates.as_mut());
    for t in templates.into_iter().flatten() {
        if !labelled(&t.metadata.name)
            && let Some(l) = t.metadata.labels.as_mut()
        {
            l.remove(labels::CLUSTER_UID);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::field_report_cluster;
    use crate::cluster::validate::validate;

    static DEFAULT_PODS: crate::security::PodSettings = crate::security::PodSettings {
        run_as_user: Some(crate::security::RUN_AS_USER),
        image_pull_secrets: Vec::new(),
    };

    fn input<'a>(c: &'a Cluster, v: &'a ValidCluster, gate: bool) -> BuildInput<'a> {
        BuildInput {
            cluster: c,
            valid: v,
            image: "img",
            manager_image: "mgr",
            domain: "cluster.local",
            restore_gate: gate,
            pods: &DEFAULT_PODS,
        }
    }

    fn built(gate: bool) -> (Cluster, ValidCluster) {
        let c = field_report_cluster();
        let v = validate(&c).expect("valid");
        let _ = gate;
        (c, v)
    }

    #[test]
    fn statefulset_pvcs_get_the_names_restores_write_into() {
        let (c, v) = built(false);
        let input = input(&c, &v, false);
        let data = v.data().expect("data");
        let sts = statefulset(&input, data);
        let spec = sts.spec.expect("spec");
        assert_eq!(sts.metadata.name.as_deref(), Some("fdb-falkordb"));
        let vct = &spec.volume_claim_templates.expect("vct")[0];
        // StatefulSet PVCs are <template>-<sts>-<ordinal>: data-fdb-falkordb-0, as restores use.
        assert_eq!(
            format!(
                "{}-{}-0",
                vct.metadata.name.as_deref().unwrap_or_default(),
                "fdb-falkordb"
            ),
            naming::data_pvc("fdb", "falkordb", 0)
        );
        assert_eq!(spec.replicas, Some(2));
        let pod = spec.template.spec.expect("pod");
        assert!(pod.readiness_gates.is_none());
    }

    #[test]
    fn restoring_data_pods_are_gated_and_sentinels_are_not() {
        let (c, v) = built(true);
        let input = input(&c, &v, true);
        let gates = |comp: &ValidComponent| {
            statefulset(&input, comp)
                .spec
                .and_then(|s| s.template.spec)
                .and_then(|p| p.readiness_gates)
                .unwrap_or_default()
        };
        let data = gates(v.data().expect("data"));
        assert_eq!(data.len(), 1);
        assert_eq!(
            data[0].condition_type,
            labels::READINESS_GATE_RESTORE_VERIFIED
        );
        assert!(gates(v.sentinel().expect("sentinel")).is_empty());
    }

    #[test]
    fn client_service_selects_the_primary_only() {
        let (c, v) = built(false);
        let input = input(&c, &v, false);
        let svc = client_service(&input, v.data().expect("data"));
        let sel = svc.spec.and_then(|s| s.selector).expect("selector");
        assert_eq!(sel.get(labels::ROLE).map(String::as_str), Some("primary"));
        let headless = headless_service(&input, v.data().expect("data"));
        let spec = headless.spec.expect("spec");
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert!(!spec.selector.unwrap_or_default().contains_key(labels::ROLE));
    }

    fn data_pod(c: &Cluster, v: &ValidCluster) -> PodSpec {
        let input = input(c, v, false);
        statefulset(&input, v.data().expect("data"))
            .spec
            .and_then(|s| s.template.spec)
            .expect("pod spec")
    }

    #[test]
    fn data_pods_run_the_instance_manager_with_no_password_on_a_command_line() {
        let (c, v) = built(false);
        let pod = data_pod(&c, &v);
        let init = &pod.init_containers.as_ref().expect("init")[0];
        assert_eq!(init.image.as_deref(), Some("mgr"));
        let main = &pod.containers[0];
        assert_eq!(
            main.command.as_deref(),
            Some(
                &[
                    "/lifeboat/bin/lifeboat-instance".to_owned(),
                    "data".to_owned()
                ][..]
            )
        );
        for probe in [&main.readiness_probe, &main.liveness_probe] {
            let p = probe.as_ref().expect("probe");
            assert!(p.exec.is_none() && p.http_get.is_some(), "{p:?}");
        }
        assert_eq!(
            main.readiness_probe.as_ref().and_then(|p| p.period_seconds),
            Some(2)
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.termination_grace_period_seconds, Some(60));
        let cm = config_map(&input(&c, &v, false), v.data().expect("data"));
        let members: serde_json::Value =
            serde_json::from_str(&cm.data.as_ref().expect("data")[MEMBERS_FILE]).expect("json");
        assert_eq!(members["data"].as_array().map(Vec::len), Some(2));
        assert_eq!(members["sentinels"].as_array().map(Vec::len), Some(3));
        assert_eq!(members["quorum"], 2);
    }

    #[test]
    fn data_and_sentinel_pods_are_admitted_under_restricted() {
        let (c, v) = built(false);
        for gate in [false, true] {
            let input = input(&c, &v, gate);
            for comp in [v.data().expect("data"), v.sentinel().expect("sentinel")] {
                let pod = statefulset(&input, comp)
                    .spec
                    .and_then(|s| s.template.spec)
                    .expect("pod spec");
                assert_eq!(
                    crate::security::restricted_violations(&pod),
                    Vec::<String>::new(),
                    "{}",
                    comp.spec.name
                );
                let sc = pod.security_context.as_ref().expect("pod context");
                assert_eq!(sc.run_as_user, Some(crate::security::RUN_AS_USER));
                assert!(
                    pod.containers.iter().all(|c| c
                        .security_context
                        .as_ref()
                        .and_then(|s| s.read_only_root_filesystem)
                        == Some(true)),
                    "{}: a writable root filesystem",
                    comp.spec.name
                );
            }
        }
    }

    #[test]
    fn scaling_changes_the_members_but_not_the_config_hash() {
        let (c, v) = built(false);
        let mut c2 = c.clone();
        c2.spec.component_specs[0].replicas += 1;
        let v2 = validate(&c2).expect("valid");
        let hash = |c: &Cluster, v: &ValidCluster| {
            let input = input(c, v, false);
            config_hash(&config_map(&input, v.data().expect("data")))
        };
        assert_eq!(hash(&c, &v), hash(&c2, &v2));
    }

    #[test]
    fn data_pods_prefer_different_nodes_unless_the_cluster_says_otherwise() {
        let (mut c, v) = built(false);
        let aff = data_pod(&c, &v).affinity.expect("affinity");
        let terms = aff
            .pod_anti_affinity
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution)
            .expect("preferred anti-affinity");
        assert_eq!(
            terms[0].pod_affinity_term.topology_key,
            "kubernetes.io/hostname"
        );
        let own = Affinity::default();
        c.spec.scheduling_policy = Some(lifeboat_api::apps::v1::SchedulingPolicy {
            affinity: Some(own.clone()),
            node_selector: BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]),
            ..Default::default()
        });
        let pod = data_pod(&c, &v);
        assert_eq!(pod.affinity, Some(own));
        assert_eq!(
            pod.node_selector
                .and_then(|m| m.get("disk").cloned())
                .as_deref(),
            Some("ssd")
        );
    }

    #[test]
    fn every_object_is_owned_by_the_cluster() {
        let (c, v) = built(false);
        let input = input(&c, &v, false);
        let comp = v.data().expect("data");
        for meta in [
            statefulset(&input, comp).metadata,
            config_map(&input, comp).metadata,
            headless_service(&input, comp).metadata,
            client_service(&input, comp).metadata,
            account_secret(&input, "pw".into()).metadata,
        ] {
            let owners = meta.owner_references.unwrap_or_default();
            assert_eq!(owners.len(), 1, "{:?}", meta.name);
            assert_eq!(owners[0].kind, "Cluster");
            assert_eq!(owners[0].controller, Some(true));
        }
    }

    #[test]
    fn claim_templates_carry_the_uid_only_where_the_statefulset_already_does() {
        let (c, v) = built(false);
        let input = input(&c, &v, false);
        let data = v.data().expect("data");
        let uid_of = |s: &StatefulSet| -> Vec<Option<String>> {
            s.spec
                .iter()
                .flat_map(|s| s.volume_claim_templates.iter().flatten())
                .map(|t| {
                    t.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(labels::CLUSTER_UID).cloned())
                })
                .collect()
        };
        let fresh = statefulset(&input, data);
        let uid = c.uid();
        assert_eq!(uid_of(&fresh), vec![uid.clone()], "a new StatefulSet");

        let mut old = fresh.clone();
        for t in old
            .spec
            .as_mut()
            .and_then(|s| s.volume_claim_templates.as_mut())
            .into_iter()
            .flatten()
        {
            t.metadata
                .labels
                .as_mut()
                .map(|l| l.remove(labels::CLUSTER_UID));
        }
        let mut again = statefulset(&input, data);
        keep_claim_templates(&mut again, &old);
        assert_eq!(uid_of(&again), vec![None], "one made before the label");
        assert_eq!(
            again.spec.as_ref().map(|s| &s.volume_claim_templates),
            old.spec.as_ref().map(|s| &s.volume_claim_templates),
            "the templates are exactly the existing ones"
        );

        let mut same = statefulset(&input, data);
        keep_claim_templates(&mut same, &fresh);
        assert_eq!(uid_of(&same), vec![uid], "one made with the label keeps it");
    }
}
