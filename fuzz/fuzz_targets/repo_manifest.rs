//! A backup's manifest as read back from a repo: bytes anyone with write access to the bucket
//! could have changed. Parsing must refuse what it cannot use, never panic, and what it accepts
//! must be safe to act on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lifeboat_mover::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Manifest::parse("nightly-1", data) else {
        return;
    };
    assert_eq!(m.backup_name, "nightly-1");
    assert!(m.rdb().is_some(), "an accepted manifest has its rdb object");
    for o in &m.objects {
        // Object names become file names under the data directory, keys object paths.
        assert!(!o.name.starts_with('/') && !o.name.split('/').any(|p| p == ".."));
        assert!(o.key.starts_with("objects/") && !o.key.split('/').any(|p| p == ".."));
        // Abbreviated in messages; must not split a character.
        let _ = lifeboat_mover::stream::short(&o.sha256);
        let _ = lifeboat_mover::stream::short(&o.stored_sha256);
    }
    // The mover writes what it parsed back unchanged (a retention rewrite, an inspect).
    let bytes = m.to_json().expect("an accepted manifest serialises");
    let again = Manifest::parse("nightly-1", &bytes).expect("its own output parses");
    assert_eq!(again, m);
});
