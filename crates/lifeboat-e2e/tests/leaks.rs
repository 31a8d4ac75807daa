//! The last tier: the namespaces that outlive their tests are searched for secret values, as
//! every `in_namespace` test's namespace is before it goes. Those are the demo's
//! (`lifeboat-demo`), the restore tier's shared source (`e2e-restore-source`), and any other
//! namespace still holding a Cluster or a Backup. The operator's whole log is searched with them.

use std::collections::BTreeSet;

use anyhow::{Result, ensure};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use lifeboat_api::{Backup, Cluster};
use lifeboat_e2e::{client, leaks};

/// Long enough to cover the operator's log since it started, for any run of `cargo xtask ci`.
const WHOLE_LOG_SECONDS: i64 = 7 * 24 * 3600;

#[tokio::test]
async fn no_namespace_left_by_the_run_holds_a_secret_value() -> Result<()> {
    let c = client().await?;
    let mut namespaces = BTreeSet::new();
    let clusters: Api<Cluster> = Api::all(c.clone());
    for cl in clusters.list(&ListParams::default()).await?.items {
        namespaces.extend(cl.namespace());
    }
    let backups: Api<Backup> = Api::all(c.clone());
    for b in backups.list(&ListParams::default()).await?.items {
        namespaces.extend(b.namespace());
    }
    ensure!(
        !namespaces.is_empty(),
        "no namespace holds a Cluster or a Backup, so this search would look at nothing; \
         it runs after the demo and the tiers, which leave some"
    );
    let mut hits = Vec::new();
    for ns in &namespaces {
        let found = leaks::search(&c, ns, WHOLE_LOG_SECONDS).await?;
        eprintln!(
            "secret leak search in {ns}: {} secret values in {} texts, {} hits",
            found.secrets,
            found.texts,
            found.hits.len()
        );
        ensure!(
            found.secrets > 0,
            "namespace {ns} holds Lifeboat objects but no secret value was found to search for"
        );
        hits.extend(found.hits);
    }
    ensure!(
        hits.is_empty(),
        "secret values leaked:\n  {}",
        hits.join("\n  ")
    );
    Ok(())
}
