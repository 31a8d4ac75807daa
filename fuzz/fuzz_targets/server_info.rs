//! `INFO` replies as the operator, the instance manager and the mover read them: text from a
//! server that may be of another version, or half-started. Any text is read without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lifeboat_instance::client::Replication;
use lifeboat_instance::lineage::LiveIdentity;
use lifeboat_operator::cluster::roles::parse_replication_info;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_replication_info(text);
    let r = Replication::parse(text);
    assert_eq!(r.text, text);
    let _ = LiveIdentity::from_info(text);
    let fields = lifeboat_mover::server::parse_info(text);
    assert!(fields.keys().all(|k| !k.contains('\n')));
});
