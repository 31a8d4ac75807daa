//! FalkorDB: Redis with the FalkorDB graph module, as KubeBlocks' `falkordb` addon shapes it.

use super::replication::{EngineNames, ReplicationEngine};

pub(super) const ENGINE: ReplicationEngine = ReplicationEngine {
    names: EngineNames {
        cluster_def: "falkordb",
        data: "falkordb",
        sentinel: "falkordb-sent",
    },
    // The image ships the module at this path; see images/falkordb/Dockerfile.
    module: Some("/usr/local/lib/falkordb.so"),
};
