//! `kubectl lifeboat`: day-2 work on Lifeboat Clusters (status, backups, restores with live
//! progress), offline validation of manifests, and the CRDs.
//!
//! Exit codes: 0 done; 1 the operation failed (a Backup or restore failed, validation found
//! problems, a wait ran out of time); 2 bad usage; 3 an object was not found; 4 the Kubernetes API
//! could not be reached or refused a request.

mod annotation;
mod backups;
mod connect;
mod day2;
mod output;
mod replication;
mod restore_status;
mod restore_to;
mod status;
mod validate;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

use connect::KubeArgs;
use output::Format;

#[derive(Parser)]
#[command(
    name = "kubectl-lifeboat",
    bin_name = "kubectl lifeboat",
    version,
    about = "Day-2 work on Lifeboat Clusters: status, backups, restores with live progress"
)]
struct Cli {
    #[command(flatten)]
    kube: KubeArgs,
    #[command(subcommand)]
    command: Command,
}

/// How often `--watch` reads again.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// How long `--wait` follows an operation by default.
const DEFAULT_WAIT: &str = "1h";

/// `90s`, `30m`, `2h`.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let bad = || format!("not a duration: {s:?} (for example 90s, 30m, 2h)");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let n: u64 = s[..split].parse().map_err(|_| bad())?;
    let unit = match &s[split..] {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(n * unit))
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
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Print the CRDs, for `kubectl lifeboat crds | kubectl apply --server-side -f -`.
    Crds,
    /// A Cluster at a glance: phase, conditions, pods with their roles, the newest backup and
    /// the newest verified one, and a restore in progress.
    Status {
        cluster: String,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
        /// Keep watching: print again whenever what is shown changes (Ctrl-C ends it).
        #[arg(short, long)]
        watch: bool,
    },
    /// Take a Backup of a Cluster now, under its BackupPolicy.
    Backup {
        cluster: String,
        /// The backup method.
        #[arg(long, default_value = "datafile")]
        method: String,
        /// The BackupPolicy; needed only when the Cluster has several.
        #[arg(long)]
        policy: Option<String>,
        /// Follow the Backup until it ends; exit 1 if it fails.
        #[arg(long)]
        wait: bool,
        /// How long --wait follows it.
        #[arg(long, default_value = DEFAULT_WAIT, value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// List Backups (of one Cluster, or of the namespace): phase, size, duration, age, whether
    /// a restore drill verified them, repo.
    Backups {
        cluster: Option<String>,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
        /// Keep watching: print again whenever a Backup appears, goes or changes.
        #[arg(short, long)]
        watch: bool,
    },
    /// Describe an object; today `backup NAME`: where its data is and its fingerprint.
    Describe {
        #[command(subcommand)]
        what: Describe,
    },
    /// Restore a Backup into a new Cluster shaped like the one it was taken from.
    Restore {
        backup: String,
        /// The new Cluster's name.
        #[arg(long = "to", value_name = "NEW_CLUSTER")]
        to: String,
        /// Follow the restore (stage, bytes, rate, ETA) until the Cluster runs verified; exit 1
        /// with the reason if it fails.
        #[arg(long)]
        wait: bool,
        /// How long --wait follows it.
        #[arg(long, default_value = DEFAULT_WAIT, value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Print the logs of the mover Jobs of a Backup (backup, drill) or of a Cluster (its
    /// restore's prepareData and verify Jobs).
    Logs {
        /// A Backup's or a Cluster's name.
        target: String,
        /// Only the last N lines of each log.
        #[arg(long)]
        tail: Option<i64>,
    },
    /// Open `redis-cli` on the Cluster's primary (through `kubectl exec`; the password comes
    /// from the pod). With a command after `--`, run it and print the reply.
    Connect {
        cluster: String,
        /// A redis-cli command, for example `-- DBSIZE`.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// A planned hand-over of the primary role: the primary's pod is deleted, and its instance
    /// manager pauses writes, waits until the replicas hold them all and has the sentinels fail
    /// over before it stops. Waits for the new primary.
    Failover {
        cluster: String,
        /// The replica to take over; honoured when it is the one ready replica (the sentinels
        /// choose among several).
        #[arg(long, value_name = "POD")]
        to: Option<String>,
        /// How long to wait for the new primary.
        #[arg(long, default_value = "5m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Print shell completions.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum Describe {
    /// A Backup: repo, path, size, times, the drill's verdict and the dataset's fingerprint.
    Backup {
        name: String,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Connect(String),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
    #[error("cannot render: {0}")]
    Render(String),
    /// A child (redis-cli) ended with this code; it said why itself.
    #[error("exited with code {0}")]
    Exit(u8),
    #[error(transparent)]
    Status(#[from] restore_status::StatusError),
    #[error("cannot render the CRDs: {0}")]
    Crds(#[from] serde_yaml::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
}

impl Error {
    pub fn api(what: impl Into<String>, source: kube::Error) -> Error {
        Error::Api {
            what: what.into(),
            source,
        }
    }

    /// The documented exit code (see the crate documentation).
    fn code(&self) -> u8 {
        match self {
            Error::Failed(_) => 1,
            Error::Exit(c) => *c,
            Error::Usage(_) => 2,
            Error::NotFound(_) => 3,
            Error::Api {
                source: kube::Error::Api(s),
                ..
            } if s.code == 404 => 3,
            Error::Connect(_) | Error::Api { .. } => 4,
            Error::Status(
                restore_status::StatusError::NotFound { .. }
                | restore_status::StatusError::NotServed { .. },
            ) => 3,
            Error::Status(
                restore_status::StatusError::Connect(_)
                | restore_status::StatusError::GetCluster { .. }
                | restore_status::StatusError::ListRestores { .. },
            ) => 4,
            _ => 1,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Feature unification can give rustls two crypto providers; pick one before any client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let result = match cli.command {
        Command::Validate { files } => return run_validate(&files),
        Command::RestoreStatus {
            cluster,
            namespace,
            output,
        } => {
            let mut kube = cli.kube.clone();
            kube.namespace = namespace.or(kube.namespace);
            block_on(run_restore_status(kube, cluster, output))
        }
        Command::Crds => run_crds(),
        Command::Completion { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "kubectl-lifeboat",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        other => block_on(run_cluster_command(&cli.kube, other)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code())
        }
    }
}

fn block_on<F: std::future::Future<Output = Result<(), Error>>>(f: F) -> Result<(), Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?
        .block_on(f)
}

fn print(s: &str) -> Result<(), Error> {
    std::io::stdout()
        .write_all(s.as_bytes())
        .map_err(Error::Stdout)
}

async fn run_cluster_command(kube: &KubeArgs, cmd: Command) -> Result<(), Error> {
    let (client, ns) = kube.connect().await?;
    match cmd {
        Command::Status {
            cluster,
            output,
            watch,
        } => {
            let mut last = String::new();
            loop {
                let v = status::fetch(&client, &ns, &cluster).await?;
                let text = output::render(output, &v, || status::human(&v))?;
                if text != last {
                    if watch && !last.is_empty() {
                        print(&format!("\n--- {}\n", k8s_openapi::jiff::Timestamp::now()))?;
                    }
                    print(&text)?;
                    last = text;
                }
                if !watch {
                    return Ok(());
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
        }
        Command::Backups {
            cluster,
            output,
            watch,
        } => {
            let start = k8s_openapi::jiff::Timestamp::now();
            let mut last = String::new();
            loop {
                let list = backups::list(&client, &ns, cluster.as_deref()).await?;
                // Compared with the ages as of the start, so that time passing alone prints
                // nothing; shown with the ages as of now.
                let key = output::render(output, &list, || backups::backups_table(&list, start))?;
                if key != last {
                    let now = k8s_openapi::jiff::Timestamp::now();
                    if watch && !last.is_empty() {
                        print(&format!("\n--- {now}\n"))?;
                    }
                    print(&output::render(output, &list, || {
                        backups::backups_table(&list, now)
                    })?)?;
                    last = key;
                }
                if !watch {
                    return Ok(());
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
        }
        Command::Describe {
            what: Describe::Backup { name, output },
        } => {
            let b = kube::Api::<lifeboat_api::Backup>::namespaced(client.clone(), &ns)
                .get_opt(&name)
                .await
                .map_err(|e| Error::api(format!("reading Backup {ns}/{name}"), e))?
                .ok_or_else(|| Error::NotFound(format!("Backup {ns}/{name}")))?;
            print(&output::render(output, &b, || backups::describe(&b))?)
        }
        Command::Backup {
            cluster,
            method,
            policy,
            wait,
            timeout,
        } => {
            let name = backups::create(&client, &ns, &cluster, &method, policy.as_deref()).await?;
            println!("backup.dataprotection.kubeblocks.io/{name} created");
            if wait {
                backups::wait(&client, &ns, &name, timeout).await?;
            }
            Ok(())
        }
        Command::Restore {
            backup,
            to,
            wait,
            timeout,
        } => {
            restore_to::create(&client, &ns, &backup, &to).await?;
            println!("cluster.apps.kubeblocks.io/{to} created, restoring from Backup {backup}");
            if wait {
                restore_to::wait(&client, &ns, &to, timeout).await?;
            }
            Ok(())
        }
        Command::Logs { target, tail } => day2::logs(&client, &ns, &target, tail).await,
        Command::Connect { cluster, args } => {
            match day2::connect(&client, kube, &ns, &cluster, &args).await? {
                0 => Ok(()),
                code => Err(Error::Exit(code)),
            }
        }
        Command::Failover {
            cluster,
            to,
            timeout,
        } => day2::failover(&client, &ns, &cluster, to.as_deref(), timeout).await,
        Command::Validate { .. }
        | Command::RestoreStatus { .. }
        | Command::Crds
        | Command::Completion { .. } => Err(Error::Usage("internal: not a cluster command".into())),
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

async fn run_restore_status(kube: KubeArgs, cluster: String, output: Format) -> Result<(), Error> {
    let (client, ns) = kube.connect().await?;
    let text = restore_status::fetch(client, &cluster, &ns, output).await?;
    print(&text)
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
