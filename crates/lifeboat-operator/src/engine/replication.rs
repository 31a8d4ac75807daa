//! The replication-with-sentinel shape shared by FalkorDB and Redis.
//!
//! Roles are decided when a server starts, not by the operator: a data pod asks the sentinels
//! which server is the master and replicates from it; with no sentinel answering (a new
//! cluster) ordinal 0 is the master. The operator only observes roles and labels pods, so a
//! failover does not depend on the operator being up.

use std::collections::BTreeMap;

use super::{ComponentDef, ComponentKind, ConfigContext, Engine, Topology};

/// Where the config files are mounted in the containers.
pub const CONFIG_DIR: &str = "/etc/lifeboat";
/// The data port.
pub const DATA_PORT: i32 = 6379;
/// The sentinel port.
pub const SENTINEL_PORT: i32 = 26379;

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
# Rendered by Lifeboat. The password and the replication source are passed on the command line
# by start.sh, so this file holds no secret and does not change when roles change.
port 6379
bind * -::*
protected-mode no
dir /data
dbfilename dump.rdb
appendonly yes
appenddirname appendonlydir
aof-load-truncated yes
replica-read-only yes
repl-diskless-sync yes
";

const START_DATA: &str = r#"#!/bin/sh
# Decides this server's replication source before it starts: the master the sentinels agree on,
# or ordinal 0 when no sentinel knows one yet (a new cluster). Started with --replicaof, a server
# never serves writes of its own before it has synced from the master.
set -eu
ordinal="${POD_NAME##*-}"
self="${POD_NAME}.${HEADLESS_SERVICE}.${POD_NAMESPACE}.svc.${CLUSTER_DOMAIN}"
# Written at every start: a server that finds it has run before, and so belongs to a cluster
# whose sentinels know the master.
ran=/data/.lifeboat-started
set -- /etc/lifeboat/redis.conf --requirepass "$REDIS_PASSWORD" --masterauth "$REDIS_PASSWORD" \
  --replica-announce-ip "$self" $SERVER_ARGS
ask_sentinels() {
  for h in ${SENTINEL_HOSTS:-}; do
    m=$(timeout 3 redis-cli -h "$h" -p 26379 --raw SENTINEL get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n1) || true
    if [ -n "$m" ]; then echo "$m"; return 0; fi
  done
  return 1
}
master=$(ask_sentinels) || master=""
if [ -z "$master" ] && [ -n "${SENTINEL_HOSTS:-}" ] && [ -e "$ran" ]; then
  # A restart, and no sentinel answered at once (DNS or the sentinels slow under load). Falling
  # back to "ordinal 0 is the master" now could bring back an old master while the sentinels
  # hand its role to a replica, so ask again for a while first.
  i=0
  while [ -z "$master" ] && [ "$i" -lt 20 ]; do
    sleep 2
    master=$(ask_sentinels) || master=""
    i=$((i + 1))
  done
  [ -n "$master" ] || echo "no sentinel answered for 40s"
fi
if [ -n "$master" ] && [ "$master" = "$self" ]; then
  # The sentinels still name this server, which is only now starting: the master was lost
  # (deleted or crashed) before they noticed. Hand the role to a replica, which holds the data and
  # is serving, rather than come back as a master behind the clients' backs. A failover already in
  # progress is waited for too; with no replica able to take over, the failover is refused and
  # this server resumes as the master.
  for h in ${SENTINEL_HOSTS}; do
    r=$(timeout 3 redis-cli -h "$h" -p 26379 SENTINEL FAILOVER "$MASTER_NAME" 2>&1) || true
    case "$r" in
      OK*|*INPROG*)
        echo "sentinel $h: ${r}; waiting for the new master"
        i=0
        while [ "$i" -lt 30 ]; do
          m=$(timeout 3 redis-cli -h "$h" -p 26379 --raw SENTINEL get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n1) || true
          if [ -n "$m" ] && [ "$m" != "$self" ]; then master="$m"; break; fi
          i=$((i + 1))
          sleep 1
        done
        break
        ;;
      *) echo "sentinel $h refused the failover: ${r:-no answer}" ;;
    esac
  done
fi
if [ -z "$master" ] && [ -n "${SENTINEL_HOSTS:-}" ] && [ "$ordinal" != "0" ]; then
  master="${FIRST_DATA_POD}"
fi
touch "$ran"
if [ -n "$master" ] && [ "$master" != "$self" ]; then
  echo "starting as a replica of $master"
  set -- "$@" --replicaof "$master" 6379
else
  echo "starting as the primary"
fi
exec redis-server "$@"
"#;

const START_SENTINEL: &str = r#"#!/bin/sh
# Joins the sentinels that already monitor the master, or starts monitoring ordinal 0 of the data
# component. The config is written fresh at every start; sentinels rediscover replicas and each
# other from the master within seconds.
set -eu
self="${POD_NAME}.${HEADLESS_SERVICE}.${POD_NAMESPACE}.svc.${CLUSTER_DOMAIN}"
master=""
for h in ${SENTINEL_HOSTS}; do
  [ "$h" = "$self" ] && continue
  m=$(timeout 3 redis-cli -h "$h" -p 26379 --raw SENTINEL get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n1) || true
  if [ -n "$m" ]; then master="$m"; break; fi
done
[ -n "$master" ] || master="${FIRST_DATA_POD}"
# Sentinel refuses a master hostname it cannot resolve, and the data pods may not exist yet
# (they wait for restored data).
until getent hosts "$master" >/dev/null 2>&1; do sleep 2; done
conf=/data/sentinel.conf
cat > "$conf" <<CONF
port 26379
dir /data
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $self
sentinel monitor $MASTER_NAME $master 6379 $QUORUM
sentinel auth-pass $MASTER_NAME $REDIS_PASSWORD
sentinel down-after-milliseconds $MASTER_NAME 5000
sentinel failover-timeout $MASTER_NAME 30000
sentinel parallel-syncs $MASTER_NAME 1
CONF
exec redis-server "$conf" --sentinel
"#;

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
        BTreeMap::from([
            ("redis.conf".to_owned(), REDIS_CONF.to_owned()),
            ("start.sh".to_owned(), START_DATA.to_owned()),
            ("start-sentinel.sh".to_owned(), START_SENTINEL.to_owned()),
        ])
    }

    fn start_command(&self, kind: ComponentKind) -> Vec<String> {
        let script = match kind {
            ComponentKind::Data => "start.sh",
            ComponentKind::Sentinel => "start-sentinel.sh",
        };
        vec!["/bin/sh".into(), format!("{CONFIG_DIR}/{script}")]
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
        assert!(lookup("postgresql").is_none());
    }
}
