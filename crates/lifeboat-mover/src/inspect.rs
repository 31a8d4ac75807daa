//! `lifeboat-mover inspect`: shows a backup's manifest.

use crate::error::Result;
use crate::manifest::Manifest;
use crate::repo::{Repo, RepoArgs};

#[derive(clap::Args, Debug, Clone)]
pub struct InspectArgs {
    #[arg(long, env = "LIFEBOAT_BACKUP_NAME")]
    pub backup: String,
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Print the manifest as JSON (one line) instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: InspectArgs) -> Result<String> {
    crate::manifest::validate_backup_name(&args.backup)?;
    let repo = Repo::open(&args.repo)?;
    let (m, _) = repo.read_manifest(&args.backup).await?;
    if args.json {
        return serde_json::to_string(&m)
            .map_err(|e| crate::error::Error::Internal(format!("cannot serialise manifest: {e}")));
    }
    Ok(render(&m))
}

fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn render(m: &Manifest) -> String {
    let mut s = String::new();
    let mut kv = |k: &str, v: String| s.push_str(&format!("{k:<14}{v}\n"));
    kv("backup", m.backup_name.clone());
    kv("format", m.format_version.to_string());
    kv("started", m.started_at.to_rfc3339());
    kv("completed", m.completed_at.to_rfc3339());
    let mut src = format!("{} redis {}", m.source.server, m.source.redis_version);
    if let Some(v) = &m.source.falkordb_version {
        src.push_str(&format!(" falkordb {v}"));
    }
    kv("source", src);
    kv(
        "compression",
        format!("{} level {}", m.compression.algorithm, m.compression.level),
    );
    kv(
        "size",
        format!("{} ({} bytes)", human(m.total_size), m.total_size),
    );
    kv(
        "stored",
        format!("{} ({} bytes)", human(m.stored_size), m.stored_size),
    );
    kv(
        "consistency",
        format!(
            "{} after {} attempt(s)",
            m.consistency.method, m.consistency.attempts
        ),
    );
    kv("fingerprint", m.fingerprint.summary());
    s.push_str(&format!(
        "\n{:<44} {:<4} {:>14} {:>14}  {:<64}  {:<64}\n",
        "OBJECT", "ROLE", "SIZE", "STORED", "SHA256", "STORED SHA256"
    ));
    for o in &m.objects {
        let role = serde_json::to_value(o.role)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        s.push_str(&format!(
            "{:<44} {:<4} {:>14} {:>14}  {:<64}  {:<64}\n",
            o.key, role, o.size, o.stored_size, o.sha256, o.stored_sha256
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_sizes() {
        assert_eq!(super::human(10), "10 B");
        assert_eq!(super::human(1536), "1.5 KiB");
        assert_eq!(super::human(3 << 30), "3.0 GiB");
    }
}
