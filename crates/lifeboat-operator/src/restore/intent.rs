//! What a Cluster asks to restore, from `spec.restore` or the deprecated annotation. Pure.
//!
//! Both entry points produce the same [`RestoreIntent`], so everything after this point has one
//! code path.

use std::time::Duration;

use k8s_openapi::api::core::v1::EnvVar;
use kube::ResourceExt;
use lifeboat_api::Cluster;
use lifeboat_api::dataprotection::v1alpha1::VolumeClaimRestorePolicy;
use lifeboat_api::labels;
use lifeboat_api::restore_annotation;

use crate::cluster::validate::{Invalid, ValidCluster};
use crate::duration;

/// Annotation Lifeboat sets once a Cluster's restore completed, so later reconciles (scale-outs
/// in particular) never restore again.
pub const RESTORE_DONE: &str = "lifeboat.io/restore-completed";

/// Which entry point asked for the restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntentSource {
    /// `spec.restore`.
    Spec,
    /// The deprecated `kubeblocks.io/restore-from-backup` annotation.
    Annotation,
}

/// The restore of one data component.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentRestore {
    /// The component to restore.
    pub component: String,
    /// The Backup's name.
    pub backup_name: String,
    /// The Backup's namespace.
    pub backup_namespace: String,
    /// Parallel or Serial volume restore.
    pub policy: VolumeClaimRestorePolicy,
    /// Extra environment for the restore Jobs.
    pub env: Vec<EnvVar>,
    /// prepareData deadline.
    pub prepare_data_deadline: Duration,
    /// postReady deadline.
    pub post_ready_deadline: Duration,
    /// Whether the deadlines were given for this restore (spec.restore parameters); given ones are
    /// kept as they are, defaults grow with the backup's size (see [`ComponentRestore::scaled`]).
    pub deadlines_given: bool,
}

/// The slowest throughput a restore stage is expected to sustain, in bytes per second: a default
/// deadline is its base plus the backup's bytes at this rate. 16 MiB/s is well below what the
/// mover does on a small bed (hundreds of MB/s copying, see the bench); it only has to tell a
/// large restore from a stuck one.
pub const FLOOR_BYTES_PER_SECOND: u64 = 16 << 20;

impl ComponentRestore {
    /// The restore with default deadlines extended by the time `data_bytes` take at
    /// [`FLOOR_BYTES_PER_SECOND`]: each stage moves (prepareData) or loads and digests
    /// (postReady) the whole dataset. Deadlines given for this restore are left as they are.
    pub fn scaled(&self, data_bytes: u64) -> ComponentRestore {
        let mut out = self.clone();
        if !self.deadlines_given {
            let extra = Duration::from_secs(data_bytes / FLOOR_BYTES_PER_SECOND);
            out.prepare_data_deadline = self.prepare_data_deadline.saturating_add(extra);
            out.post_ready_deadline = self.post_ready_deadline.saturating_add(extra);
        }
        out
    }
}

/// What a Cluster asks to restore.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoreIntent {
    /// Where the request came from.
    pub source: IntentSource,
    /// One entry per restored data component.
    pub components: Vec<ComponentRestore>,
}

impl RestoreIntent {
    /// Which request and which Backup, for messages.
    pub fn source_description(&self) -> String {
        let from = match self.source {
            IntentSource::Spec => "spec.restore",
            IntentSource::Annotation => "the kubeblocks.io/restore-from-backup annotation",
        };
        match self.components.first() {
            Some(c) => format!("Backup {}/{} ({from})", c.backup_namespace, c.backup_name),
            None => from.to_owned(),
        }
    }
}

/// Whether a restore request arrived after the Cluster already ran: its workload exists but no
/// Restore object does. A real restore creates the Restore first and the workload only once the
/// data is in place, so this never holds for one, even after an operator restart.
pub fn arrived_late(workload_exists: bool, restore_object_exists: bool) -> bool {
    workload_exists && !restore_object_exists
}

/// Default deadlines, from the operator's configuration.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub prepare_data: Duration,
    pub post_ready: Duration,
}

/// Reads the Cluster's restore request. `Ok(None)` when it asks for none, or its restore already
/// completed.
pub fn intent(
    cluster: &Cluster,
    valid: &ValidCluster,
    defaults: Deadlines,
) -> Result<Option<RestoreIntent>, Invalid> {
    let annotations = cluster.annotations();
    if annotations.contains_key(RESTORE_DONE) {
        return Ok(None);
    }
    let ns = cluster.namespace().unwrap_or_default();
    let annotation = annotations.get(labels::RESTORE_FROM_BACKUP);
    let field = format!("metadata.annotations[{}]", labels::RESTORE_FROM_BACKUP);
    let data = valid
        .data()
        .ok_or_else(|| Invalid::new("spec.componentSpecs", "has no data component to restore"))?;
    match (&cluster.spec.restore, annotation) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(Invalid::new(
            field,
            "conflicts with spec.restore: a Cluster is restored from one request; remove the \
             deprecated annotation and keep spec.restore",
        )),
        (Some(r), None) => {
            if let Some(pitr) = &r.pitr {
                return Err(Invalid::new(
                    "spec.restore.pitr",
                    format!(
                        "point-in-time recovery ({pitr:?}) is not supported; Lifeboat restores full \
                         backups: remove spec.restore.pitr"
                    ),
                ));
            }
            let p = &r.parameters;
            let param = |k: &str| format!("spec.restore.parameters[{k}]");
            let policy = match p
                .get(labels::PARAM_VOLUME_RESTORE_POLICY)
                .map(String::as_str)
            {
                None | Some("Parallel") => VolumeClaimRestorePolicy::Parallel,
                Some("Serial") => VolumeClaimRestorePolicy::Serial,
                Some(other) => {
                    return Err(Invalid::new(
                        param(labels::PARAM_VOLUME_RESTORE_POLICY),
                        format!("must be Parallel or Serial, not {other:?}"),
                    ));
                }
            };
            let env = match p.get(labels::PARAM_RESTORE_ENV) {
                None => Vec::new(),
                Some(json) => serde_json::from_str(json).map_err(|e| {
                    Invalid::new(
                        param(labels::PARAM_RESTORE_ENV),
                        format!("must be a JSON list of {{name, value}}: {e}"),
                    )
                })?,
            };
            if let Some((_, name)) = crate::mover_env::first_reserved(&env) {
                return Err(Invalid::new(
                    param(labels::PARAM_RESTORE_ENV),
                    crate::mover_env::refusal(name),
                ));
            }
            let deadlines_given = p.contains_key(labels::PARAM_PREPARE_DATA_DEADLINE)
                || p.contains_key(labels::PARAM_POST_READY_DEADLINE);
            let deadline = |key: &str, default: Duration| match p.get(key) {
                None => Ok(default),
                Some(v) => duration::parse(v).filter(|d| !d.is_zero()).ok_or_else(|| {
                    Invalid::new(
                        param(key),
                        format!("must be a duration such as 90s, 15m or 1h30m, not {v:?}"),
                    )
                }),
            };
            Ok(Some(RestoreIntent {
                source: IntentSource::Spec,
                components: vec![ComponentRestore {
                    component: data.spec.name.clone(),
                    backup_name: r.source.name.clone(),
                    backup_namespace: r.source.namespace.clone().unwrap_or(ns),
                    policy,
                    env,
                    prepare_data_deadline: deadline(
                        labels::PARAM_PREPARE_DATA_DEADLINE,
                        defaults.prepare_data,
                    )?,
                    post_ready_deadline: deadline(
                        labels::PARAM_POST_READY_DEADLINE,
                        defaults.post_ready,
                    )?,
                    deadlines_given,
                }],
            }))
        }
        (None, Some(value)) => {
            let requests = restore_annotation::parse(value)
                .map_err(|e| Invalid::new(field.clone(), e.to_string()))?;
            let mut components = Vec::new();
            for (component, req) in requests {
                let known = valid.components.iter().find(|c| c.spec.name == component);
                match known {
                    None => {
                        return Err(Invalid::new(
                            field,
                            format!(
                                "names component {component:?}, which this Cluster does not have"
                            ),
                        ));
                    }
                    Some(c) if c.def.kind != crate::engine::ComponentKind::Data => {
                        return Err(Invalid::new(
                            field,
                            format!(
                                "names component {component:?}, which holds no data to restore"
                            ),
                        ));
                    }
                    Some(_) => {}
                }
                if let Some(t) = &req.restore_time {
                    return Err(Invalid::new(
                        field,
                        format!(
                            "component {component:?} asks for restoreTime {t:?}; point-in-time \
                             recovery is not supported"
                        ),
                    ));
                }
                if let Some((_, name)) = crate::mover_env::first_reserved(&req.env) {
                    return Err(Invalid::new(
                        field,
                        format!(
                            "component {component:?}: env {}",
                            crate::mover_env::refusal(name)
                        ),
                    ));
                }
                components.push(ComponentRestore {
                    component,
                    backup_name: req.name,
                    backup_namespace: req.namespace.unwrap_or_else(|| ns.clone()),
                    policy: req.volume_restore_policy.unwrap_or_default(),
                    env: req.env,
                    prepare_data_deadline: defaults.prepare_data,
                    post_ready_deadline: defaults.post_ready,
                    deadlines_given: false,
                });
            }
            Ok(Some(RestoreIntent {
                source: IntentSource::Annotation,
                components,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_is_late_only_when_the_workload_exists_without_a_restore() {
        // A new Cluster asking for a restore: nothing exists yet.
        assert!(!super::arrived_late(false, false));
        // A restore in progress or done: its Restore object came first.
        assert!(!super::arrived_late(false, true));
        assert!(!super::arrived_late(true, true));
        // The annotation added to a Cluster that runs.
        assert!(super::arrived_late(true, false));
    }

    use super::*;
    use crate::cluster::test_support::field_report_cluster;
    use crate::cluster::validate::validate;
    use lifeboat_api::apps::v1::{ClusterRestore, RestoreSource};

    const D: Deadlines = Deadlines {
        prepare_data: Duration::from_secs(900),
        post_ready: Duration::from_secs(600),
    };

    fn with_annotation(v: &str) -> Cluster {
        let mut c = field_report_cluster();
        c.annotations_mut()
            .insert(labels::RESTORE_FROM_BACKUP.into(), v.into());
        c
    }

    fn with_spec(params: &[(&str, &str)]) -> Cluster {
        let mut c = field_report_cluster();
        c.spec.restore = Some(ClusterRestore {
            source: RestoreSource {
                api_group: "dataprotection.kubeblocks.io".into(),
                kind: "Backup".into(),
                name: "fdb-backup-datafile".into(),
                namespace: None,
            },
            pitr: None,
            parameters: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        c
    }

    fn run(c: &Cluster) -> Result<Option<RestoreIntent>, Invalid> {
        intent(c, &validate(c).expect("valid"), D)
    }

    #[test]
    fn no_request_means_no_restore() {
        assert_eq!(run(&field_report_cluster()), Ok(None));
    }

    #[test]
    fn both_entry_points_give_the_same_restore() {
        let a = run(&with_annotation(
            r#"{"falkordb":{"name":"fdb-backup-datafile","namespace":"demo","volumeRestorePolicy":"Parallel"}}"#,
        ))
        .expect("valid")
        .expect("restore");
        let s = run(&with_spec(&[])).expect("valid").expect("restore");
        assert_eq!(a.source, IntentSource::Annotation);
        assert_eq!(s.source, IntentSource::Spec);
        assert_eq!(a.components, s.components);
        assert_eq!(s.components[0].component, "falkordb");
        assert_eq!(s.components[0].backup_namespace, "demo");
    }

    #[test]
    fn serial_policy_and_deadlines_are_read() {
        let s = run(&with_spec(&[
            (labels::PARAM_VOLUME_RESTORE_POLICY, "Serial"),
            (labels::PARAM_PREPARE_DATA_DEADLINE, "90s"),
        ]))
        .expect("valid")
        .expect("restore");
        assert_eq!(s.components[0].policy, VolumeClaimRestorePolicy::Serial);
        assert_eq!(
            s.components[0].prepare_data_deadline,
            Duration::from_secs(90)
        );
        assert_eq!(s.components[0].post_ready_deadline, D.post_ready);
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e =
            run(&with_spec(&[(labels::PARAM_PREPARE_DATA_DEADLINE, "soon")])).expect_err("invalid");
        assert!(e.field.contains(labels::PARAM_PREPARE_DATA_DEADLINE), "{e}");
        let e = run(&with_spec(&[(labels::PARAM_RESTORE_ENV, "{")])).expect_err("invalid");
        assert!(e.field.contains(labels::PARAM_RESTORE_ENV), "{e}");
    }

    #[test]
    fn user_environment_never_overrides_the_movers_own_settings() {
        let e = run(&with_spec(&[(
            labels::PARAM_RESTORE_ENV,
            r#"[{"name":"TZ","value":"UTC"},{"name":"LIFEBOAT_REPO","value":"file:///elsewhere"}]"#,
        )]))
        .expect_err("a reserved variable");
        assert!(e.field.contains(labels::PARAM_RESTORE_ENV), "{e}");
        assert!(e.message.contains("LIFEBOAT_REPO"), "{e}");
        let e = run(&with_annotation(
            r#"{"falkordb":{"name":"b","env":[{"name":"AWS_ENDPOINT_URL","value":"http://x"}]}}"#,
        ))
        .expect_err("a reserved variable");
        assert!(e.message.contains("AWS_ENDPOINT_URL"), "{e}");
        // A variable of the user's own passes through.
        let ok = run(&with_spec(&[(
            labels::PARAM_RESTORE_ENV,
            r#"[{"name":"TZ","value":"UTC"}]"#,
        )]))
        .expect("valid")
        .expect("restore");
        assert_eq!(ok.components[0].env[0].name, "TZ");
    }

    #[test]
    fn annotation_and_spec_together_fail() {
        let mut c = with_spec(&[]);
        c.annotations_mut().insert(
            labels::RESTORE_FROM_BACKUP.into(),
            r#"{"falkordb":{"name":"x"}}"#.into(),
        );
        let e = run(&c).expect_err("conflict");
        assert!(e.message.contains("conflicts with spec.restore"), "{e}");
    }

    #[test]
    fn malformed_annotation_fails_naming_it() {
        let e = run(&with_annotation("{not json")).expect_err("malformed");
        assert!(e.field.contains(labels::RESTORE_FROM_BACKUP), "{e}");
        let e = run(&with_annotation(r#"{"falkordb-sent":{"name":"b"}}"#)).expect_err("sentinel");
        assert!(e.message.contains("holds no data"), "{e}");
        let e = run(&with_annotation(r#"{"redis":{"name":"b"}}"#)).expect_err("unknown");
        assert!(e.message.contains("does not have"), "{e}");
    }

    #[test]
    fn pitr_is_refused_not_ignored() {
        let mut c = with_spec(&[]);
        if let Some(r) = c.spec.restore.as_mut() {
            r.pitr = Some("2026-01-01T00:00:00Z".into());
        }
        let e = run(&c).expect_err("pitr");
        assert_eq!(e.field, "spec.restore.pitr");
    }

    #[test]
    fn completed_restore_is_not_repeated() {
        let mut c = with_spec(&[]);
        c.annotations_mut()
            .insert(RESTORE_DONE.into(), "fdb-falkordb-restore".into());
        assert_eq!(run(&c), Ok(None));
    }

    #[test]
    fn default_deadlines_grow_with_the_backups_size_and_given_ones_do_not() {
        let base = ComponentRestore {
            component: "falkordb".into(),
            backup_name: "b".into(),
            backup_namespace: "ns".into(),
            policy: VolumeClaimRestorePolicy::Parallel,
            env: Vec::new(),
            prepare_data_deadline: Duration::from_secs(900),
            post_ready_deadline: Duration::from_secs(600),
            deadlines_given: false,
        };
        // 10 GiB at 16 MiB/s: 640 s more for each stage.
        let big = base.scaled(10 << 30);
        assert_eq!(big.prepare_data_deadline, Duration::from_secs(900 + 640));
        assert_eq!(big.post_ready_deadline, Duration::from_secs(600 + 640));
        assert_eq!(base.scaled(0), base, "an empty backup keeps the base");
        let given = ComponentRestore {
            deadlines_given: true,
            ..base.clone()
        };
        assert_eq!(
            given.scaled(10 << 30),
            given,
            "a deadline given is a deadline kept"
        );
    }
}
