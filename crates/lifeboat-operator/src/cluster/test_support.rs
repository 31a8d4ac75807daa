//! Fixtures for the planning tests: the field report's Cluster, built from YAML as a user
//! writes it.

use lifeboat_api::Cluster;

pub const FIELD_REPORT_CLUSTER: &str = r#"
apiVersion: apps.kubeblocks.io/v1
kind: Cluster
metadata:
  name: fdb
  namespace: demo
  uid: 1b2c3d4e-0000-0000-0000-000000000001
  generation: 1
spec:
  terminationPolicy: WipeOut
  clusterDef: falkordb
  topology: replication
  componentSpecs:
    - name: falkordb
      replicas: 2
      volumeClaimTemplates:
        - name: data
          spec:
            accessModes: [ReadWriteOnce]
            resources:
              requests:
                storage: 1Gi
    - name: falkordb-sent
      replicas: 3
      volumeClaimTemplates:
        - name: data
          spec:
            accessModes: [ReadWriteOnce]
            resources:
              requests:
                storage: 1Gi
"#;

pub fn field_report_cluster() -> Cluster {
    serde_yaml::from_str(FIELD_REPORT_CLUSTER).expect("fixture parses")
}
