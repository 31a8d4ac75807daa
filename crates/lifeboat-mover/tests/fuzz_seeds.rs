//! The manifest fuzz target starts from `fuzz/seeds/repo_manifest`; each seed must stay a
//! manifest this mover accepts, or the target would explore refusals only.

use std::path::PathBuf;

use lifeboat_mover::manifest::Manifest;

#[test]
fn every_manifest_seed_parses() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/repo_manifest");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("the seed directory") {
        let p = e.expect("an entry").path();
        let bytes = std::fs::read(&p).expect("a readable seed");
        Manifest::parse("nightly-1", &bytes)
            .unwrap_or_else(|e| panic!("seed {} does not parse: {e}", p.display()));
        n += 1;
    }
    assert!(n > 0, "no manifest seeds in {}", dir.display());
}
