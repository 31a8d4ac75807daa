//! Randomized schedules of the real Cluster and Backup controllers against the simulated API
//! server, a few with the workspace's tests; `cargo xtask sim` runs thousands
//! (docs/simulation.md).

#[tokio::test(flavor = "current_thread")]
async fn schedules_keep_every_invariant_and_reach_both_ends() {
    let n: u64 = 50;
    let mut phases = std::collections::BTreeMap::new();
    let mut backups = std::collections::BTreeMap::new();
    let mut backup_jobs = 0;
    for seed in 0..n {
        let o = lifeboat_sim::harness::run(seed, 60).await;
        if let Some(v) = &o.violation {
            panic!(
                "seed {seed}: {v}\nreplay: cargo xtask sim --seed {seed}\ntrace:\n  {}",
                o.trace.join("\n  ")
            );
        }
        *phases.entry(o.final_phase.clone()).or_insert(0) += 1;
        *backups.entry(o.backup_phase.clone()).or_insert(0) += 1;
        backup_jobs += o.backup_jobs;
    }
    // A harness whose schedules all end one way tests one path: both must be reached.
    for end in ["Completed", "Failed"] {
        assert!(
            phases.get(&Some(end.to_owned())).is_some_and(|n| *n > 0),
            "no schedule of {n} ended {end}: {phases:?}"
        );
        assert!(
            backups.get(&Some(end.to_owned())).is_some_and(|n| *n > 0),
            "no schedule of {n} ended with its Backup {end}: {backups:?}"
        );
    }
    assert!(backup_jobs > 0, "no schedule of {n} started a backup Job");
}
