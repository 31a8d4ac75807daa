//! A Cluster as the API server hands it over: any JSON that deserialises into the type (the CRD
//! schema is the API server's check, and an older CRD may have let more through). Validation,
//! the restore request it carries, and the objects built from a valid Cluster must refuse with a
//! message naming a field, or succeed, never panic.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use lifeboat_api::Cluster;
use lifeboat_operator::cluster::build::{self, BuildInput};
use lifeboat_operator::cluster::validate::validate;
use lifeboat_operator::restore::intent::{Deadlines, intent};
use lifeboat_operator::security::{PodSettings, RUN_AS_USER};

fuzz_target!(|data: &[u8]| {
    let Ok(cluster) = serde_json::from_slice::<Cluster>(data) else {
        return;
    };
    let valid = match validate(&cluster) {
        Ok(v) => v,
        Err(e) => {
            assert!(!e.field.is_empty(), "a refusal names the field: {e:?}");
            return;
        }
    };
    let defaults = Deadlines {
        prepare_data: Duration::from_secs(1800),
        post_ready: Duration::from_secs(1800),
    };
    match intent(&cluster, &valid, defaults) {
        Ok(Some(i)) => {
            assert!(!i.components.is_empty(), "a restore restores something");
            for c in &i.components {
                assert!(!c.backup_name.is_empty());
                for bytes in [0, 1 << 30, u64::MAX] {
                    let s = c.scaled(bytes);
                    assert!(s.prepare_data_deadline >= c.prepare_data_deadline);
                    assert!(s.post_ready_deadline >= c.post_ready_deadline);
                }
                let _ = i.source_description();
            }
        }
        Ok(None) => {}
        Err(e) => assert!(!e.field.is_empty(), "a refusal names the field: {e:?}"),
    }
    let pods = PodSettings {
        run_as_user: Some(RUN_AS_USER),
        image_pull_secrets: Vec::new(),
    };
    for restore_gate in [false, true] {
        let input = BuildInput {
            cluster: &cluster,
            valid: &valid,
            image: "img",
            manager_image: "mgr",
            domain: "cluster.local",
            restore_gate,
            pods: &pods,
        };
        let _ = input.secret_name();
        for comp in &valid.components {
            let _ = build::config_map(&input, comp);
            let _ = build::headless_service(&input, comp);
            let _ = build::client_service(&input, comp);
            let sts = build::statefulset(&input, comp);
            assert!(
                build::applied_spec(&sts).is_some(),
                "a built StatefulSet records its spec"
            );
        }
    }
});
