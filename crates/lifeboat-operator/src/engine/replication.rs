//! The replication-with-sentinel shape shared by FalkorDB and Redis.
//!
//! Roles are decided when a server starts, not by the operator: each data pod's instance manager
//! (`lifeboat-instance`, crates/lifeboat-instance) follows the serving primary, or on a cold start
//! chooses the primary by the data the pods hold. The operator only observes roles and labels
//! pods, so a failover does not depend on the operator being up.

use std::collections::BTreeMap;

use super::{ComponentDef, ComponentKind, ConfigContext, Engine, Topology};

/// Where the config files are mounted in the containers.
pub const CONFIG_DIR: &str = "/etc/lifeboat";
/// The data port.
pub const DATA_PORT: i32 = 6379;
/// The sentinel port.
pub const SENTINEL_PORT: i32 = 26379;
/// The instance manager's port: probes, and the reports peers and the operator read.
pub const MANAGER_PORT: i32 = 8000;
/// Where an init container installs the instance manager, from the mover image.
pub const MANAGER_DIR: &str = "/lifeboat";
/// The instance manager binary in the database container.
pub const MANAGER_BIN: &str = "/lifeboat/bin/lifeboat-instance";

/// Component names of an engine.
#[derive(Clone, Copy, Debug)]
pub struct EngineNames {
    /// The `spec.clusterDef` value.
    pub cluster_def: &'static str,
    /// The data component.
    pub data: &'static str,
    /// The sentinel component.
    pub sentinel: &'static str,
}

/// A Redis-protocol engine with `standalone` and `replication` topologies.
#[derive(Clone, Copy, Debug)]
pub struct ReplicationEngine {
    /// Component names.
    pub names: EngineNames,
    /// The server module to load, if any.
    pub module: Option<&'static str>,
}

const REDIS_CONF: &str = "\
# Rendered by Lifeboat. The instance manager includes this file from a config of its own that
# holds the password and the replication source, so this file holds no secret and does not
# change when roles change.
bind * -::*
protected-mode no
dir /data
dbfilename dump.rdb
appendonly yes
appenddirname appendonlydir
aof-load-truncated yes
replica-read-only yes
repl-diskless-sync yes
# A replica that needs a full sync gets it a second after asking, not five: replicas that start
# together (a failover, a restore whose backup carries no replication identity) still ask within
# that second and share one snapshot.
repl-diskless-sync-delay 1
# The replication id must not change while no replica is attached: the instance manager compares
# datasets by their replication history.
repl-backlog-ttl 0
# A stopping primary waits this long for its replicas to acknowledge the last writes.
shutdown-timeout 10
";

impl Engine for ReplicationEngine {
    fn cluster_def(&self) -> &'static str {
        self.names.cluster_def
    }

    fn topologies(&self) -> Vec<Topology> {
        let data = |min| ComponentDef {
            name: self.names.data,
            kind: ComponentKind::Data,
            min_replicas: min,
            port: DATA_PORT,
        };
        vec![
            Topology {
                name: "standalone",
                components: vec![data(1)],
            },
            Topology {
                name: "replication",
                components: vec![
                    ComponentDef {
                        name: self.names.sentinel,
                        kind: ComponentKind::Sentinel,
                        min_replicas: 3,
                        port: SENTINEL_PORT,
                    },
                    data(2),
                ],
            },
        ]
    }

    fn default_topology(&self) -> &'static str {
        "standalone"
    }

    fn server_args(&self) -> Vec<String> {
        match self.module {
            Some(m) => vec!["--loadmodule".into(), m.into()],
            None => Vec::new(),
        }
    }

    fn config_files(&self, _ctx: &ConfigContext<'_>) -> BTreeMap<String, String> {
        BTreeMap::from([("redis.conf".to_owned(), REDIS_CONF.to_owned())])
    }

    fn start_command(&self, kind: ComponentKind) -> Vec<String> {
        let role = match kind {
            ComponentKind::Data => "data",
            ComponentKind::Sentinel => "sentinel",
        };
        vec![MANAGER_BIN.into(), role.into()]
    }

    fn has_graphs(&self) -> bool {
        self.module.is_some()
    }

    fn master_name(&self, cluster: &str) -> String {
        format!("{cluster}-{}", self.names.data)
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::lookup;

    #[test]
    fn falkordb_replication_matches_kubeblocks_addon() {
        let e = lookup("falkordb").expect("served");
        let t = e.topology(Some("replication")).expect("topology");
        let names: Vec<_> = t.components.iter().map(|c| c.name).collect();
        assert_eq!(names, ["falkordb-sent", "falkordb"]);
        assert_eq!(e.topology(None).map(|t| t.name), Some("standalone"));
        assert!(e.has_graphs());
        assert_eq!(e.server_args()[0], "--loadmodule");
    }

    #[test]
    fn redis_has_the_same_shapes_without_the_module() {
        let e = lookup("redis").expect("served");
        let t = e.topology(Some("replication")).expect("topology");
        let names: Vec<_> = t.components.iter().map(|c| c.name).collect();
        assert_eq!(names, ["redis-sentinel", "redis"]);
        assert!(!e.has_graphs());
        assert!(e.server_args().is_empty());
        assert!(e.modules().is_empty());
        assert_eq!(
            lookup("falkordb").expect("served").modules(),
            ["/usr/local/lib/falkordb.so"]
        );
        assert!(lookup("postgresql").is_none());
    }
}
