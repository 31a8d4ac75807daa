//! `lifeboat-instance`: see the library's documentation.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lifeboat_instance::settings::Settings;
use lifeboat_instance::{data, sentinel};

#[derive(Parser)]
#[command(
    name = "lifeboat-instance",
    about = "Lifeboat's instance manager for data and sentinel pods"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a data pod: decide the role, start and supervise redis-server.
    Data,
    /// Run a sentinel pod: keep the sentinel's file, start and supervise the sentinel.
    Sentinel,
    /// Copy this binary into DIR (an init container puts it beside the database image's server).
    Install {
        /// Where to copy the binary.
        dir: PathBuf,
    },
}

fn install(dir: &std::path::Path) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    std::fs::create_dir_all(dir)?;
    let dest = dir.join("lifeboat-instance");
    let tmp = dir.join(".lifeboat-instance.tmp");
    std::fs::copy(&me, &tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, &dest)?;
    println!("installed {}", dest.display());
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIFEBOAT_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_target(false)
        .init();
    let cli = Cli::parse();
    // Everything the manager and its servers write is the pod user's alone: the sentinel rewrites
    // its file (which holds the password) with 0644 & !umask, and data files hold the dataset.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let r: anyhow::Result<()> = match cli.command {
        Cmd::Install { dir } => install(&dir),
        Cmd::Data => match Settings::from_env() {
            Ok(s) => data::run(s).await.map_err(Into::into),
            Err(e) => Err(e.into()),
        },
        Cmd::Sentinel => match Settings::from_env() {
            Ok(s) => sentinel::run(s).await.map_err(Into::into),
            Err(e) => Err(e.into()),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
