//! The Pod Security Standard `restricted` for every pod Lifeboat creates: database pods, sentinel
//! pods and the mover's Jobs are admitted in a namespace that enforces it.
//!
//! One numeric user runs every Lifeboat pod. It has to be the same one: the backup Job reads the
//! files the database server wrote into its volume, and the server reads what a restore Job wrote,
//! and both keep their files private to their owner (umask 077).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, LocalObjectReference, PodSecurityContext,
    PodSpec, SeccompProfile, SecurityContext, Volume, VolumeMount,
};

/// The user (and group, and fsGroup) every Lifeboat pod runs as by default, and the images'
/// numeric `USER`.
pub const RUN_AS_USER: i64 = 999;

/// The writable scratch directory of a pod whose root filesystem is read-only (the backup's
/// scratch server keeps its socket there).
pub const TMP_DIR: &str = "/tmp";
const TMP_VOLUME: &str = "tmp";

/// What the installation decides about every pod Lifeboat creates (`--pod-run-as-user`,
/// `--pod-image-pull-secrets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSettings {
    /// The user, group and fsGroup of every pod; `None` leaves all three to the platform, as
    /// OpenShift's `restricted-v2` requires (it assigns one from the namespace's range, the same
    /// to every pod of the namespace, so the backup Job still reads what the server wrote).
    pub run_as_user: Option<i64>,
    /// Pull Secrets, by name in the pod's own namespace, for a private registry.
    pub image_pull_secrets: Vec<String>,
}

impl Default for PodSettings {
    fn default() -> Self {
        Self {
            run_as_user: Some(RUN_AS_USER),
            image_pull_secrets: Vec::new(),
        }
    }
}

/// Reads `--pod-run-as-user`: a positive number, or `platform`.
pub fn parse_run_as_user(s: &str) -> Result<Option<i64>, String> {
    if s == "platform" {
        return Ok(None);
    }
    match s.parse::<i64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!(
            "--pod-run-as-user {s:?}: expected a user id above 0 (restricted refuses root) or \"platform\""
        )),
    }
}

/// The pod-level context: a non-root user, volumes group-owned by it where the volume plugin
/// manages ownership (`fsGroup`; local-path volumes are created world-writable instead), and the
/// runtime's default seccomp profile.
pub fn pod_security_context(settings: &PodSettings) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: settings.run_as_user,
        run_as_group: settings.run_as_user,
        fs_group: settings.run_as_user,
        // A large restored volume is not walked on every start once its ownership is right.
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container-level context: no privilege escalation, no capabilities, a read-only root
/// filesystem (every program Lifeboat starts writes only to its volumes and `/tmp`).
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

/// Makes `spec` meet `restricted`: the pod and every container get the contexts above, and every
/// container gets a private, writable `/tmp` unless it mounts one itself; no pod gets an API token.
pub fn restrict(spec: &mut PodSpec, settings: &PodSettings) {
    spec.security_context = Some(pod_security_context(settings));
    if !settings.image_pull_secrets.is_empty() {
        spec.image_pull_secrets = Some(
            settings
                .image_pull_secrets
                .iter()
                .map(|name| LocalObjectReference { name: name.clone() })
                .collect(),
        );
    }
    // Neither the mover nor the instance manager talks to the Kubernetes API.
    spec.automount_service_account_token = Some(false);
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    let mut needs_tmp = false;
    for c in containers {
        c.security_context = Some(container_security_context());
        needs_tmp |= add_tmp_mount(c);
    }
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if needs_tmp && !volumes.iter().any(|v| v.name == TMP_VOLUME) {
        volumes.push(Volume {
            name: TMP_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                // Scratch space only: the backup's scratch server holds its data in memory.
                size_limit: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "64Mi".into(),
                )),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

/// `spec`, made to meet `restricted` ([`restrict`]).
pub fn restricted(mut spec: PodSpec, settings: &PodSettings) -> PodSpec {
    restrict(&mut spec, settings);
    spec
}

/// Mounts the pod's `/tmp` volume in `c` unless something is mounted there already; true when it
/// was added.
fn add_tmp_mount(c: &mut Container) -> bool {
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    if mounts.iter().any(|m| m.mount_path == TMP_DIR) {
        return false;
    }
    mounts.push(VolumeMount {
        name: TMP_VOLUME.into(),
        mount_path: TMP_DIR.into(),
        ..Default::default()
    });
    true
}

/// What in `spec` the Pod Security Standard `restricted` (Kubernetes 1.34) refuses, one line per
/// finding naming the container and field; empty when the pod is admitted. The checks follow
/// the standard's table, so a builder that drops a field is caught by a unit test, not only by
/// the admission of the bed.
pub fn restricted_violations(spec: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    let pod = spec.security_context.clone().unwrap_or_default();
    if spec.host_network == Some(true) || spec.host_pid == Some(true) || spec.host_ipc == Some(true)
    {
        out.push("spec: host namespaces are shared".into());
    }
    for v in spec.volumes.iter().flatten() {
        let allowed = v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some();
        if !allowed {
            out.push(format!(
                "volume {}: a volume type restricted forbids",
                v.name
            ));
        }
    }
    let pod_seccomp = pod.seccomp_profile.as_ref().map(|p| p.type_.as_str());
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        let sc = c.security_context.clone().unwrap_or_default();
        let name = &c.name;
        if sc.privileged == Some(true) {
            out.push(format!("container {name}: privileged"));
        }
        if sc.allow_privilege_escalation != Some(false) {
            out.push(format!(
                "container {name}: securityContext.allowPrivilegeEscalation is not false"
            ));
        }
        let drops_all = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|d| d == "ALL"));
        if !drops_all {
            out.push(format!(
                "container {name}: securityContext.capabilities.drop does not hold ALL"
            ));
        }
        let adds = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_some_and(|a| a.iter().any(|a| a != "NET_BIND_SERVICE"));
        if adds {
            out.push(format!(
                "container {name}: securityContext.capabilities.add beyond NET_BIND_SERVICE"
            ));
        }
        if sc.run_as_non_root.or(pod.run_as_non_root) != Some(true) {
            out.push(format!("container {name}: runAsNonRoot is not true"));
        }
        if sc.run_as_user.or(pod.run_as_user) == Some(0) {
            out.push(format!("container {name}: runAsUser is 0"));
        }
        let seccomp = sc
            .seccomp_profile
            .as_ref()
            .map(|p| p.type_.as_str())
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            out.push(format!(
                "container {name}: seccompProfile is neither RuntimeDefault nor Localhost"
            ));
        }
        if c.ports
            .iter()
            .flatten()
            .any(|p| p.host_port.is_some_and(|h| h != 0))
        {
            out.push(format!("container {name}: a host port"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &[&str]) -> PodSpec {
        PodSpec {
            containers: containers
                .iter()
                .map(|n| Container {
                    name: (*n).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_with_no_security_context_is_refused_on_every_count() {
        let v = restricted_violations(&pod(&["db"]));
        for want in [
            "allowPrivilegeEscalation",
            "capabilities.drop",
            "runAsNonRoot",
            "seccompProfile",
        ] {
            assert!(
                v.iter().any(|l| l.contains(want)),
                "{want} missing in {v:?}"
            );
        }
    }

    #[test]
    fn a_restricted_pod_is_admitted_and_gets_one_private_tmp() {
        let mut spec = pod(&["a", "b"]);
        spec.init_containers = Some(vec![Container {
            name: "init".into(),
            ..Default::default()
        }]);
        restrict(&mut spec, &PodSettings::default());
        restrict(&mut spec, &PodSettings::default());
        assert_eq!(restricted_violations(&spec), Vec::<String>::new());
        let tmp = spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == TMP_VOLUME)
            .count();
        assert_eq!(tmp, 1, "restrict is idempotent");
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let mounts: Vec<_> = c
                .volume_mounts
                .iter()
                .flatten()
                .filter(|m| m.mount_path == TMP_DIR)
                .collect();
            assert_eq!(mounts.len(), 1, "{}", c.name);
        }
    }

    #[test]
    fn a_root_user_or_an_added_capability_is_refused() {
        let mut spec = pod(&["db"]);
        restrict(&mut spec, &PodSettings::default());
        let c = &mut spec.containers[0];
        let sc = c.security_context.get_or_insert_with(Default::default);
        sc.run_as_user = Some(0);
        sc.capabilities = Some(Capabilities {
            add: Some(vec!["SYS_ADMIN".into()]),
            drop: Some(vec!["ALL".into()]),
        });
        let v = restricted_violations(&spec);
        assert!(v.iter().any(|l| l.contains("runAsUser is 0")), "{v:?}");
        assert!(v.iter().any(|l| l.contains("capabilities.add")), "{v:?}");
    }

    #[test]
    fn a_platform_assigned_user_leaves_the_ids_unset_and_is_still_admitted() {
        let mut spec = pod(&["db"]);
        let settings = PodSettings {
            run_as_user: None,
            image_pull_secrets: vec!["registry".into(), "mirror".into()],
        };
        restrict(&mut spec, &settings);
        assert_eq!(restricted_violations(&spec), Vec::<String>::new());
        let sc = spec.security_context.clone().unwrap_or_default();
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.fs_group),
            (None, None, None)
        );
        assert_eq!(sc.run_as_non_root, Some(true));
        let secrets: Vec<_> = spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(secrets, ["registry", "mirror"]);
    }

    #[test]
    fn the_run_as_user_flag_takes_a_user_or_platform_and_refuses_root() {
        assert_eq!(parse_run_as_user("999"), Ok(Some(999)));
        assert_eq!(parse_run_as_user("platform"), Ok(None));
        for bad in ["0", "-1", "root", ""] {
            let e = parse_run_as_user(bad).expect_err(bad);
            assert!(e.contains("--pod-run-as-user"), "{e}");
        }
    }
}
