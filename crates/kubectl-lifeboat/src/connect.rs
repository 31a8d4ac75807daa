//! The flags every command that talks to a cluster takes, as kubectl spells them, and the client
//! they make.

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::Error;

#[derive(Args, Clone, Debug, Default)]
pub struct KubeArgs {
    /// The namespace; the kubeconfig context's namespace when absent.
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig file; `KUBECONFIG` or `~/.kube/config` when absent.
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
}

impl KubeArgs {
    /// A client and the namespace to work in.
    pub async fn connect(&self) -> Result<(Client, String), Error> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path).map_err(|e| {
                    Error::Connect(format!("cannot read kubeconfig {}: {e}", path.display()))
                })?;
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| Error::Connect(format!("kubeconfig {}: {e}", path.display())))?
            }
            None if self.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::Connect(format!("cannot load the kubeconfig: {e}")))?,
            None => Config::infer()
                .await
                .map_err(|e| Error::Connect(format!("cannot load the kubeconfig: {e}")))?,
        };
        let ns = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config)
            .map_err(|e| Error::Connect(format!("cannot build a client: {e}")))?;
        Ok((client, ns))
    }
}
