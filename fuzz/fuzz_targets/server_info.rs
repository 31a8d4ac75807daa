//! `INFO` replies as the operator, the instance manager and the mover read them, and the AOF
//! manifest the instance manager reads before a start: text from a server that may be of another
//! version, or half-started, or a file it left half-written. Any text is read without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lifeboat_instance::boot;
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
    let _ = boot::aof_progress(text);
    // A manifest entry names a file inside the AOF directory, never a path out of it: the
    // manager may remove the files a manifest lists.
    if let Some(entries) = boot::parse_manifest(text) {
        assert!(entries.iter().all(|(name, _)| !name.contains('/') && name != ".."));
    }
});
