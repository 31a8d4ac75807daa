//! `cargo xtask crdgen`: writes the CRD YAML generated from the API types to deploy/crds.
//!
//! The YAML is checked in so that users can `kubectl apply` it without building anything; the
//! drift test in lifeboat-api fails when it no longer matches the types.

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::paths::workspace_root;

#[derive(Args)]
pub struct CrdgenArgs {
    /// Fail instead of writing when the checked-in YAML differs from the types.
    #[arg(long)]
    check: bool,
}

/// Fails when the checked-in YAML is stale; used by `cargo xtask ci`.
pub fn run_check() -> Result<()> {
    run(CrdgenArgs { check: true })
}

pub fn run(args: CrdgenArgs) -> Result<()> {
    let dir = workspace_root().join("deploy/crds");
    let rendered = lifeboat_api::crds::rendered().context("rendering CRDs")?;
    let stale =
        lifeboat_api::crds::stale_files(&rendered, |f| std::fs::read_to_string(dir.join(f)).ok());
    if args.check {
        if !stale.is_empty() {
            bail!(
                "deploy/crds is stale for {}: run `cargo xtask crdgen`",
                stale.join(", ")
            );
        }
        return Ok(());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (file, yaml) in rendered.iter().filter(|(f, _)| stale.contains(f)) {
        let path = dir.join(file);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
