//! Caches of the objects that every Cluster pass reads, fed by watches, so that a pass over an
//! idle Cluster costs no API reads.
//!
//! A Cluster is reconciled every few seconds to follow failovers. Each pass used to list its
//! pods, Restores and loose claims and read its StatefulSets and password Secret from the API
//! server: at 1,000 Clusters that was 37,700 reads a minute, and the reads themselves took most
//! of each pass, so the operator could not keep up with its own requeues (docs/benchmarks.md).
//!
//! What is cached, and why each read may come from a cache:
//! - **Pods** (labelled `app.kubernetes.io/managed-by=lifeboat`), trimmed to what role
//!   observation reads: labels, owners, UID and pod IP. A role label is patched with the pod's
//!   UID as a precondition, so a stale pod is never labelled for its successor. And the restore
//!   gate's condition, which a restored Cluster checks on every pass to open it on a pod created
//!   since: a stale pod only delays that opening to a later pass, and opening it twice changes
//!   nothing.
//! - **StatefulSets** (same label), without their pod template. A miss is read from the API
//!   server: a StatefulSet the cache has not seen yet is not taken as absent.
//! - **Restores**, for Clusters that ask for no restore (the restored Cluster's gate is kept).
//!   A Cluster with a restore request reads them from the API server, because whether a restore
//!   arrived late is decided from them.
//! - **Claims without the `lifeboat.io/cluster-uid` label**: only a pre-filter. When the cache
//!   holds a candidate, adoption lists and proves as before.
//! - **Passwords** are kept in memory and read again every [`PASSWORD_REFRESH`]. Secrets are not
//!   watched: a watch needs `list` on Secrets, which would let the operator read every Secret in
//!   the cluster.
//!
//! Until a cache has listed everything once, reads go to the API server; the simulation and the
//! unit tests, which start no watches, always read from it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodStatus};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use lifeboat_api::{Restore, labels};
use tokio::task::JoinHandle;

use crate::context::Context;
use crate::error::Result;
use crate::kubeapi;

/// Objects per page of a watch's list. A page is held whole while it is read, as text and as
/// objects with their managed fields, before any trimming: at kube-runtime's default of 500, the
/// lists of all the operator's watches at start-up were most of a restarted leader's peak heap at
/// 1,000 Clusters (heaptrack: 117 MB; 53 MB with pages of 50 for these caches alone).
const PAGE: u32 = 50;

/// The configuration every watch of the operator starts from.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(PAGE)
}

/// How long a password read from its Secret is used before it is read again.
pub const PASSWORD_REFRESH: Duration = Duration::from_secs(60);

/// The caches; empty (every read goes to the API server) until [`Observed::start`].
#[derive(Default)]
pub struct Observed {
    pods: Slot<Pod>,
    statefulsets: Slot<StatefulSet>,
    restores: Slot<Restore>,
    loose_claims: Slot<PersistentVolumeClaim>,
    /// Set by `start`: the simulation's and tests' contexts read every password.
    remember_passwords: OnceLock<()>,
    passwords: Mutex<HashMap<PasswordKey, (String, Instant)>>,
}

/// Namespace, Secret name and Cluster UID.
type PasswordKey = (String, String, String);

/// A store, published once its watch has listed everything.
type Slot<K> = Arc<OnceLock<Store<K>>>;

/// The label selector of the objects Lifeboat makes.
pub fn managed() -> String {
    format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE)
}

/// Whether a cached object is in namespace `ns` and labelled as Cluster `cluster`'s.
fn of_cluster<K: Resource>(o: &K, ns: &str, cluster: &str) -> bool {
    o.meta().namespace.as_deref() == Some(ns)
        && o.meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::INSTANCE))
            .map(String::as_str)
            == Some(cluster)
}

/// Fills `slot` with a store once its watch has listed everything, and feeds it until aborted.
fn feed<K>(api: Api<K>, config: watcher::Config, trim: fn(&mut K), slot: Slot<K>) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let ready = reader.clone();
    tokio::spawn(async move {
        let publish = async move {
            if ready.wait_until_ready().await.is_ok() {
                let _ = slot.set(ready);
            }
        };
        let run = watcher(api, config)
            .default_backoff()
            .modify(trim)
            .reflect(writer)
            .for_each(|_| async {});
        futures::join!(publish, run);
    })
}

impl Observed {
    /// Starts the watches; each cache is used once it has listed everything.
    pub fn start(&self, client: &Client) -> Vec<JoinHandle<()>> {
        let _ = self.remember_passwords.set(());
        let by_label = watch_config().labels(&managed());
        vec![
            feed(
                Api::<Pod>::all(client.clone()),
                by_label.clone(),
                trim_pod,
                self.pods.clone(),
            ),
            feed(
                Api::<StatefulSet>::all(client.clone()),
                by_label,
                trim_statefulset,
                self.statefulsets.clone(),
            ),
            feed(
                Api::<Restore>::all(client.clone()),
                watch_config(),
                trim_meta,
                self.restores.clone(),
            ),
            feed(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                watch_config().labels(&format!("{},!{}", labels::INSTANCE, labels::CLUSTER_UID)),
                trim_meta,
                self.loose_claims.clone(),
            ),
        ]
    }

    /// A remembered password of the Cluster with UID `uid`, if it was read less than
    /// [`PASSWORD_REFRESH`] ago. Keyed by the UID too: a Cluster created again under the same
    /// name has a new Secret.
    pub fn password(&self, ns: &str, secret: &str, uid: &str) -> Option<String> {
        self.remember_passwords.get()?;
        let map = self.passwords.lock().ok()?;
        map.get(&(ns.to_owned(), secret.to_owned(), uid.to_owned()))
            .filter(|(_, at)| at.elapsed() < PASSWORD_REFRESH)
            .map(|(p, _)| p.clone())
    }

    /// Remembers a password just read from its Secret, and forgets the expired ones (of
    /// Clusters since deleted, among others).
    pub fn remember_password(&self, ns: &str, secret: &str, uid: &str, password: &str) {
        if self.remember_passwords.get().is_none() {
            return;
        }
        if let Ok(mut map) = self.passwords.lock() {
            map.retain(|_, (_, at)| at.elapsed() < PASSWORD_REFRESH);
            map.insert(
                (ns.to_owned(), secret.to_owned(), uid.to_owned()),
                (password.to_owned(), Instant::now()),
            );
        }
    }

    /// Every Restore the cache holds, or `None` before it has listed them (the fleet gauges).
    pub fn all_restores(&self) -> Option<Vec<Arc<Restore>>> {
        self.restores.get().map(Store::state)
    }
}

/// Keeps what the Cluster pass reads of a pod: the managed fields and the spec are most of its
/// size, and a thousand Clusters have several thousand pods. Of its conditions, only the restore
/// gate's, which a restored Cluster's every pass checks on each data pod.
pub fn trim_pod(p: &mut Pod) {
    trim_meta(p);
    p.spec = None;
    let status = p.status.take().unwrap_or_default();
    let gate: Vec<_> = status
        .conditions
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == labels::READINESS_GATE_RESTORE_VERIFIED)
        .collect();
    p.status = Some(PodStatus {
        pod_ip: status.pod_ip,
        conditions: (!gate.is_empty()).then_some(gate),
        ..Default::default()
    });
}

/// Keeps a StatefulSet's claim templates, replica counts and metadata; drops its pod template.
pub fn trim_statefulset(s: &mut StatefulSet) {
    trim_meta(s);
    if let Some(spec) = s.spec.as_mut() {
        spec.template = Default::default();
    }
}

pub fn trim_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// The pods of a Cluster's component that its StatefulSet runs (see
/// [`crate::cluster::component_pods`]), as far as the role observation reads them.
pub async fn workload_pods(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    component: &str,
) -> Result<Vec<Pod>> {
    let Some(store) = ctx.observed.pods.get() else {
        return crate::cluster::component_pods(ctx, ns, cluster, component).await;
    };
    let mut pods: Vec<Pod> = store
        .state_filter(|p| {
            of_cluster(p, ns, cluster)
                && p.labels().get(labels::COMPONENT_NAME).map(String::as_str) == Some(component)
                && crate::cluster::is_workload_pod(p)
        })
        .into_iter()
        .map(|p| (*p).clone())
        .collect();
    pods.sort_by_key(ResourceExt::name_any);
    Ok(pods)
}

/// A StatefulSet (without its pod template when it comes from the cache); a miss asks the API
/// server.
pub async fn statefulset(ctx: &Context, ns: &str, name: &str) -> Result<Option<StatefulSet>> {
    if let Some(s) = ctx
        .observed
        .statefulsets
        .get()
        .and_then(|s| s.get(&ObjectRef::new(name).within(ns)))
    {
        return Ok(Some((*s).clone()));
    }
    kubeapi::get_opt(&ctx.client, ns, name).await
}

/// A Cluster's Restores. `authoritative` reads them from the API server.
pub async fn restores_of(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    authoritative: bool,
) -> Result<Vec<Restore>> {
    match ctx.observed.restores.get().filter(|_| !authoritative) {
        Some(store) => Ok(store
            .state_filter(|r| of_cluster(r, ns, cluster))
            .into_iter()
            .map(|r| (*r).clone())
            .collect()),
        None => kubeapi::list(&ctx.client, ns, &format!("{}={cluster}", labels::INSTANCE)).await,
    }
}

/// Whether a Cluster may have claims to adopt: `false` only when the cache has listed the
/// claims and holds none of this Cluster's without the UID label.
pub fn may_have_loose_claims(ctx: &Context, ns: &str, cluster: &str) -> bool {
    ctx.observed
        .loose_claims
        .get()
        .is_none_or(|store| store.find(|c| of_cluster(c, ns, cluster)).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, ObjectMeta, OwnerReference,
    };
    use std::collections::BTreeMap;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("c-falkordb-0".into()),
            namespace: Some("ns".into()),
            uid: Some("u-1".into()),
            labels: Some(BTreeMap::from([(labels::ROLE.into(), "primary".into())])),
            owner_references: Some(vec![OwnerReference {
                kind: "StatefulSet".into(),
                name: "c-falkordb".into(),
                ..Default::default()
            }]),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            ..Default::default()
        }
    }

    #[test]
    fn a_trimmed_pod_keeps_what_role_observation_reads() {
        let mut p = Pod {
            metadata: meta(),
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                pod_ip: Some("10.0.0.7".into()),
                phase: Some("Running".into()),
                ..Default::default()
            }),
        };
        trim_pod(&mut p);
        assert_eq!(p.metadata.managed_fields, None);
        assert_eq!(
            p.status.as_ref().and_then(|s| s.conditions.as_ref()),
            None,
            "no condition is kept but the restore gate's"
        );
        assert_eq!(p.spec, None);
        assert_eq!(
            p.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
            Some("10.0.0.7")
        );
        assert_eq!(p.uid().as_deref(), Some("u-1"));
        assert_eq!(
            p.labels().get(labels::ROLE).map(String::as_str),
            Some("primary")
        );
        assert!(crate::cluster::is_workload_pod(&p));
    }

    #[test]
    fn a_trimmed_pod_keeps_the_restore_gate_and_no_other_condition() {
        use k8s_openapi::api::core::v1::PodCondition;
        let cond = |t: &str| PodCondition {
            type_: t.into(),
            status: "True".into(),
            ..Default::default()
        };
        let mut p = Pod {
            metadata: meta(),
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![
                    cond("Ready"),
                    cond(labels::READINESS_GATE_RESTORE_VERIFIED),
                    cond("ContainersReady"),
                ]),
                ..Default::default()
            }),
        };
        trim_pod(&mut p);
        let kept: Vec<&str> = p
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, [labels::READINESS_GATE_RESTORE_VERIFIED]);
    }

    #[test]
    fn a_trimmed_statefulset_keeps_its_claim_templates_and_readiness() {
        let template = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec::default()),
            ..Default::default()
        };
        let mut s = StatefulSet {
            metadata: meta(),
            spec: Some(StatefulSetSpec {
                replicas: Some(2),
                template: PodTemplateSpec {
                    spec: Some(PodSpec::default()),
                    ..Default::default()
                },
                volume_claim_templates: Some(vec![template.clone()]),
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                ready_replicas: Some(2),
                ..Default::default()
            }),
        };
        trim_statefulset(&mut s);
        let spec = s.spec.as_ref().expect("spec kept");
        assert_eq!(spec.template, PodTemplateSpec::default());
        assert_eq!(spec.volume_claim_templates, Some(vec![template]));
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(s.status.and_then(|st| st.ready_replicas), Some(2));
        assert_eq!(s.metadata.managed_fields, None);
        assert_eq!(s.metadata.owner_references.map(|o| o.len()), Some(1));
    }

    #[test]
    fn passwords_are_remembered_only_by_a_started_operator_and_per_cluster_uid() {
        let o = Observed::default();
        o.remember_password("ns", "c-account", "uid-1", "secret-1");
        assert_eq!(
            o.password("ns", "c-account", "uid-1"),
            None,
            "the simulation's and tests' contexts read every password"
        );
        let _ = o.remember_passwords.set(());
        o.remember_password("ns", "c-account", "uid-1", "secret-1");
        assert_eq!(
            o.password("ns", "c-account", "uid-1").as_deref(),
            Some("secret-1")
        );
        assert_eq!(o.password("other", "c-account", "uid-1"), None);
        assert_eq!(
            o.password("ns", "c-account", "uid-2"),
            None,
            "a Cluster created again under the same name reads its own Secret"
        );
    }
}
