//! Database engines. Each engine is a Rust module behind the [`Engine`] trait: its cluster
//! definition, topologies, components, server configuration and start-up commands. FalkorDB and
//! Redis speak the same protocol and share one replication-with-sentinel implementation.

mod falkordb;
mod redis;
pub mod replication;

use std::collections::BTreeMap;

pub use replication::ReplicationEngine;

/// What a component of a topology is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComponentKind {
    /// Holds the data; restored from backups; backed up.
    Data,
    /// Sentinel: watches the data pods and fails over.
    Sentinel,
}

/// One component a topology requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentDef {
    /// Its name in `spec.componentSpecs[].name`, for example `falkordb` or `falkordb-sent`.
    pub name: &'static str,
    /// What it does.
    pub kind: ComponentKind,
    /// The fewest replicas the topology works with.
    pub min_replicas: i32,
    /// The port the component serves on.
    pub port: i32,
}

/// A topology of a cluster definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Its name in `spec.topology`.
    pub name: &'static str,
    /// The components, in the order they are provisioned (sentinels first, as KubeBlocks does).
    pub components: Vec<ComponentDef>,
}

/// A database engine Lifeboat can run.
pub trait Engine: Send + Sync {
    /// The `spec.clusterDef` value that selects this engine.
    fn cluster_def(&self) -> &'static str;
    /// The topologies the engine offers.
    fn topologies(&self) -> Vec<Topology>;
    /// The topology used when `spec.topology` is empty.
    fn default_topology(&self) -> &'static str;
    /// The arguments the data server starts with, after its config file.
    fn server_args(&self) -> Vec<String>;
    /// Files the component's ConfigMap carries, by file name.
    fn config_files(&self, ctx: &ConfigContext<'_>) -> BTreeMap<String, String>;
    /// The command the component's main container runs.
    fn start_command(&self, kind: ComponentKind) -> Vec<String>;
    /// Whether the engine stores graphs (FalkorDB) as well as keys.
    fn has_graphs(&self) -> bool;
    /// The sentinel master name for a Cluster.
    fn master_name(&self, cluster: &str) -> String;

    /// The modules the data server loads, by path: what a scratch server loading this
    /// engine's files (a restore drill) must load too.
    fn modules(&self) -> Vec<String> {
        self.server_args()
            .windows(2)
            .filter(|w| w[0] == "--loadmodule")
            .map(|w| w[1].clone())
            .collect()
    }

    /// Looks up a topology by name, or the default.
    fn topology(&self, name: Option<&str>) -> Option<Topology> {
        let name = name.unwrap_or(self.default_topology());
        self.topologies().into_iter().find(|t| t.name == name)
    }
}

/// What an engine needs to know to render a component's configuration.
#[derive(Clone, Debug)]
pub struct ConfigContext<'a> {
    /// The Cluster's name.
    pub cluster: &'a str,
    /// The namespace.
    pub namespace: &'a str,
    /// The topology in use.
    pub topology: &'a Topology,
    /// Replicas of each component, by name.
    pub replicas: BTreeMap<String, i32>,
}

static FALKORDB: ReplicationEngine = falkordb::ENGINE;
static REDIS: ReplicationEngine = redis::ENGINE;

/// The engine for a `spec.clusterDef`, if Lifeboat serves it.
pub fn lookup(cluster_def: &str) -> Option<&'static dyn Engine> {
    match cluster_def {
        "falkordb" => Some(&FALKORDB),
        "redis" => Some(&REDIS),
        _ => None,
    }
}

/// Every cluster definition Lifeboat serves, for error messages.
pub fn served() -> &'static [&'static str] {
    &["falkordb", "redis"]
}
