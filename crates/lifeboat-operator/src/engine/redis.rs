//! Redis, as KubeBlocks' `redis` addon shapes it: the same replication and sentinel topology as
//! FalkorDB, without the graph module.

use super::replication::{EngineNames, ReplicationEngine};

pub(super) const ENGINE: ReplicationEngine = ReplicationEngine {
    names: EngineNames {
        cluster_def: "redis",
        data: "redis",
        sentinel: "redis-sentinel",
    },
    module: None,
};
