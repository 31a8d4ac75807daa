//! The deprecated `kubeblocks.io/restore-from-backup` annotation, as users (and old KubeBlocks
//! manifests) write it: any string. Accepted values must satisfy what the parser promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lifeboat_api::restore_annotation::{AnnotationError, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse(text) {
        Ok(map) => {
            assert!(!map.is_empty(), "an accepted annotation names a component");
            for req in map.values() {
                assert!(
                    !req.name.trim().is_empty(),
                    "an accepted entry names a backup"
                );
                if let Some(v) = &req.do_ready_restore_after_cluster_running {
                    assert!(v == "true" || v == "false", "accepted bool {v:?}");
                }
            }
            // What was accepted survives a round trip: the operator records it as it read it.
            let again = serde_json::to_string(&map).expect("serialises");
            assert_eq!(parse(&again).ok(), Some(map));
        }
        // Every refusal names the annotation, so the user can find what to fix.
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("kubeblocks.io/restore-from-backup"), "{msg}");
            if let AnnotationError::EmptyName { component }
            | AnnotationError::BadBool { component, .. } = &e
            {
                assert!(msg.contains(&format!("{component:?}")), "{msg}");
            }
        }
    }
});
