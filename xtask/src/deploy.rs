//! Deploys Lifeboat onto the test bed from the rendered manifest, the way a user would.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::paths::workspace_root;
use crate::run::{stage, status};
use crate::testbed::kubectl_command;

const NAMESPACE: &str = "lifeboat-system";

/// Applies deploy/lifeboat.yaml, restarts the operator so it runs the image just built (the tag
/// is fixed, the content is not), and waits until it leads.
pub fn operator() -> Result<()> {
    stage("deploy lifeboat", || {
        let manifest = workspace_root().join("deploy/lifeboat.yaml");
        let manifest = manifest.to_string_lossy();
        status(&mut kubectl_command(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &manifest,
        ]))?;
        status(&mut kubectl_command(&[
            "-n",
            NAMESPACE,
            "rollout",
            "restart",
            "deployment/lifeboat-operator",
        ]))?;
        status(&mut kubectl_command(&[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            "deployment/lifeboat-operator",
            "--timeout=180s",
        ]))?;
        wait_leader(Duration::from_secs(90))
    })
}

fn wait_leader(timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let out = kubectl_command(&[
            "-n",
            NAMESPACE,
            "get",
            "lease",
            "lifeboat-operator-leader",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .output()?;
        let holder = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !holder.is_empty() {
            eprintln!("lifeboat-operator leader: {holder}");
            return Ok(());
        }
        if start.elapsed() > timeout {
            let _ = status(&mut kubectl_command(&[
                "-n",
                NAMESPACE,
                "logs",
                "deployment/lifeboat-operator",
                "--tail=50",
            ]));
            bail!(
                "no lifeboat-operator replica took the leader lease within {}s",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
