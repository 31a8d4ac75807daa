//! `kubectl lifeboat`: validate Lifeboat manifests offline, follow a Cluster's restore, and print
//! the CRDs.

mod annotation;
mod restore_status;
mod validate;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kubectl-lifeboat",
    bin_name = "kubectl lifeboat",
    version,
    about = "Validate Lifeboat manifests, follow restores, print the CRDs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check manifests against the CRD schemas and validation rules, without a cluster. Prints one
    /// `FILE: Kind/name: field: message` line per problem and exits 1 if there is any.
    Validate {
        /// YAML files, each with one or more documents; `-` reads standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
    },
    /// Show a Cluster's restore: its phase and Restore condition, each Restore's stages, and the
    /// verification of the restored data against the backup.
    RestoreStatus {
        /// The Cluster's name.
        cluster: String,
        /// The Cluster's namespace; the kubeconfig context's namespace when absent.
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Print the CRDs, for `kubectl lifeboat crds | kubectl apply --server-side -f -`.
    Crds,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Status(#[from] restore_status::StatusError),
    #[error("cannot render the CRDs: {0}")]
    Crds(#[from] serde_yaml::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Feature unification can give rustls two crypto providers; pick one before any client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let result = match cli.command {
        Command::Validate { files } => return run_validate(&files),
        Command::RestoreStatus { cluster, namespace } => {
            run_restore_status(&cluster, namespace.as_deref())
        }
        Command::Crds => run_crds(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_validate(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for path in files {
        let name = path.display().to_string();
        let content = if name == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(path)
        };
        let report = match content {
            Ok(content) => validate::validate(&name, &content),
            Err(e) => validate::Report {
                problems: vec![format!("{name}: cannot read: {e}")],
                warnings: Vec::new(),
            },
        };
        for w in &report.warnings {
            eprintln!("{w}");
        }
        for p in &report.problems {
            println!("{p}");
        }
        failed |= !report.problems.is_empty();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn run_restore_status(cluster: &str, namespace: Option<&str>) -> Result<(), Error> {
    // A single-threaded runtime: the command makes two requests, one after the other.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let text = runtime.block_on(restore_status::fetch(cluster, namespace))?;
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(Error::Stdout)
}

fn run_crds() -> Result<(), Error> {
    let rendered = lifeboat_api::crds::rendered()?;
    let mut out = String::new();
    for (_, yaml) in rendered {
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(Error::Stdout)
}
