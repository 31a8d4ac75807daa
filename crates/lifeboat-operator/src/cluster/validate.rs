//! Checks a Cluster against its engine before anything is created. Pure.

use kube::ResourceExt;
use lifeboat_api::Cluster;
use lifeboat_api::apps::v1::ClusterComponentSpec;

use crate::engine::{self, ComponentDef, Engine, Topology};
use crate::naming;

/// Why a Cluster cannot be built: the field and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    /// The field, for example `spec.componentSpecs[1].replicas`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A component checked against its definition.
#[derive(Clone, Debug)]
pub struct ValidComponent {
    /// The definition.
    pub def: ComponentDef,
    /// The user's spec.
    pub spec: ClusterComponentSpec,
    /// Its index in `spec.componentSpecs`, for messages.
    pub index: usize,
}

/// A Cluster that its engine can build.
#[derive(Clone)]
pub struct ValidCluster {
    /// The engine.
    pub engine: &'static dyn Engine,
    /// The topology in use.
    pub topology: Topology,
    /// The components, in provisioning order.
    pub components: Vec<ValidComponent>,
}

impl std::fmt::Debug for ValidCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidCluster")
            .field("engine", &self.engine.cluster_def())
            .field("topology", &self.topology)
            .field("components", &self.components)
            .finish()
    }
}

impl ValidCluster {
    /// The data component.
    pub fn data(&self) -> Option<&ValidComponent> {
        self.components
            .iter()
            .find(|c| c.def.kind == engine::ComponentKind::Data)
    }

    /// The sentinel component, in a replication topology.
    pub fn sentinel(&self) -> Option<&ValidComponent> {
        self.components
            .iter()
            .find(|c| c.def.kind == engine::ComponentKind::Sentinel)
    }
}

/// Checks the Cluster's definition, topology, components and replica counts.
pub fn validate(cluster: &Cluster) -> Result<ValidCluster, Invalid> {
    let spec = &cluster.spec;
    let def = spec
        .cluster_def
        .as_deref()
        .ok_or_else(|| Invalid::new("spec.clusterDef", "is required"))?;
    let engine = engine::lookup(def).ok_or_else(|| {
        Invalid::new(
            "spec.clusterDef",
            format!(
                "unknown cluster definition {def:?}; Lifeboat serves {}",
                engine::served().join(", ")
            ),
        )
    })?;
    let topology = engine.topology(spec.topology.as_deref()).ok_or_else(|| {
        let known: Vec<_> = engine.topologies().iter().map(|t| t.name).collect();
        Invalid::new(
            "spec.topology",
            format!(
                "unknown topology {:?} for {def}; it has {}",
                spec.topology.as_deref().unwrap_or_default(),
                known.join(", ")
            ),
        )
    })?;
    for (i, c) in spec.component_specs.iter().enumerate() {
        if !topology.components.iter().any(|d| d.name == c.name) {
            let known: Vec<_> = topology.components.iter().map(|d| d.name).collect();
            return Err(Invalid::new(
                format!("spec.componentSpecs[{i}].name"),
                format!(
                    "unknown component {:?} for topology {}; it has {}",
                    c.name,
                    topology.name,
                    known.join(", ")
                ),
            ));
        }
        if let Some(j) = spec.component_specs[..i]
            .iter()
            .position(|o| o.name == c.name)
        {
            return Err(Invalid::new(
                format!("spec.componentSpecs[{i}].name"),
                format!("duplicates spec.componentSpecs[{j}].name {:?}", c.name),
            ));
        }
    }
    let mut components = Vec::new();
    for def in &topology.components {
        let Some((index, spec)) = spec
            .component_specs
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == def.name)
        else {
            return Err(Invalid::new(
                "spec.componentSpecs",
                format!(
                    "topology {} needs a component named {:?}",
                    topology.name, def.name
                ),
            ));
        };
        if spec.replicas < def.min_replicas {
            return Err(Invalid::new(
                format!("spec.componentSpecs[{index}].replicas"),
                format!(
                    "component {:?} needs at least {} replicas in topology {}, not {}",
                    def.name, def.min_replicas, topology.name, spec.replicas
                ),
            ));
        }
        components.push(ValidComponent {
            def: def.clone(),
            spec: spec.clone(),
            index,
        });
    }
    names_fit(&cluster.name_any(), &components)?;
    Ok(ValidCluster {
        engine,
        topology,
        components,
    })
}

/// The names Lifeboat derives from the Cluster's name must be valid where they are used: Services,
/// Jobs and pod host names are DNS labels (63 characters), and a StatefulSet's name also goes,
/// with an 11-character hash, into a 63-character label value. A name that breaks one would make a
/// create fail on every pass, far from its cause.
fn names_fit(cluster: &str, components: &[ValidComponent]) -> Result<(), Invalid> {
    for c in components {
        let comp = &c.spec.name;
        let last = c.spec.replicas.max(1) - 1;
        let mut derived = vec![
            (naming::workload(cluster, comp), 52),
            (naming::headless_service(cluster, comp), 63),
            (naming::client_service(cluster, comp), 63),
            (naming::pod(cluster, comp, last), 63),
        ];
        if c.def.kind == engine::ComponentKind::Data {
            derived.push((naming::prepare_data_job(cluster, comp, last), 63));
            derived.push((naming::verify_job(cluster, comp), 63));
        }
        if let Some((name, limit)) = derived.into_iter().find(|(n, l)| n.len() > *l) {
            return Err(Invalid::new(
                "metadata.name",
                format!(
                    "is too long for the names Lifeboat derives from it: {name:?} has {} characters, \
                     more than its limit of {limit}; shorten the Cluster's name by {}",
                    name.len(),
                    name.len() - limit
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::field_report_cluster;

    #[test]
    fn a_cluster_name_whose_derived_names_do_not_fit_is_refused_naming_the_field() {
        let mut c = field_report_cluster();
        c.metadata.name = Some("a".repeat(30));
        assert!(validate(&c).is_ok(), "30 characters fit");
        c.metadata.name = Some("a".repeat(45));
        let e = validate(&c).expect_err("too long");
        let msg = e.to_string();
        assert!(
            msg.contains("metadata.name") && msg.contains("limit of"),
            "{msg}"
        );
    }

    #[test]
    fn field_report_cluster_is_valid() {
        let v = validate(&field_report_cluster()).expect("valid");
        assert_eq!(v.topology.name, "replication");
        assert_eq!(v.data().map(|c| c.spec.replicas), Some(2));
        assert_eq!(v.sentinel().map(|c| c.spec.replicas), Some(3));
    }

    #[test]
    fn unknown_definition_names_the_field() {
        let mut c = field_report_cluster();
        c.spec.cluster_def = Some("mongodb".into());
        let e = validate(&c).expect_err("invalid");
        assert_eq!(e.field, "spec.clusterDef");
        assert!(e.message.contains("mongodb"), "{e}");
    }

    #[test]
    fn unknown_topology_names_the_field() {
        let mut c = field_report_cluster();
        c.spec.topology = Some("sharded".into());
        let e = validate(&c).expect_err("invalid");
        assert_eq!(e.field, "spec.topology");
    }

    #[test]
    fn unknown_component_names_the_field() {
        let mut c = field_report_cluster();
        c.spec.component_specs[1].name = "falkordb-sentinel".into();
        let e = validate(&c).expect_err("invalid");
        assert_eq!(e.field, "spec.componentSpecs[1].name");
    }

    #[test]
    fn too_few_replicas_names_the_field() {
        let mut c = field_report_cluster();
        c.spec.component_specs[1].replicas = 1;
        let e = validate(&c).expect_err("invalid");
        assert_eq!(e.field, "spec.componentSpecs[1].replicas");
        assert!(e.message.contains("at least 3"), "{e}");
        let mut c = field_report_cluster();
        c.spec.component_specs[0].replicas = 1;
        let e = validate(&c).expect_err("invalid");
        assert_eq!(e.field, "spec.componentSpecs[0].replicas");
    }

    #[test]
    fn missing_component_names_the_field() {
        let mut c = field_report_cluster();
        c.spec.component_specs.pop();
        let e = validate(&c).expect_err("invalid");
        assert_eq!(e.field, "spec.componentSpecs");
        assert!(e.message.contains("falkordb-sent"), "{e}");
    }
}
