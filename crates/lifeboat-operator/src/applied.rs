//! Server-side applies that would change nothing are not sent.
//!
//! A Cluster is reconciled every few seconds so that its role labels follow failovers. Applying
//! each of its objects and its status on every pass cost about a hundred API writes a minute for
//! every idle Cluster, which at a thousand Clusters is the API server's whole budget. An apply is
//! skipped only when both hold:
//! - the body Lifeboat would send is the one it last sent for that object (a digest), and
//! - the object in the API server still has the resourceVersion that this apply returned, as a
//!   metadata watch of Lifeboat's objects (`app.kubernetes.io/managed-by=lifeboat`) sees it.
//!
//! So any change by anyone else (an edit, a deletion, a label removed) makes the next pass apply
//! again, and no read is spent to find out. The record is kept in memory only: a restarted
//! operator, or one that became leader again, applies everything once.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What was last applied to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The digest of the body sent.
    pub digest: u64,
    /// The resourceVersion the API server answered with.
    pub resource_version: String,
}

/// Whether an apply must be sent: unless Lifeboat sent this very body, and the object is still at
/// the version that apply left it at. Pure.
pub fn needs_apply(last: Option<&Record>, digest: u64, observed_version: Option<&str>) -> bool {
    match (last, observed_version) {
        (Some(r), Some(seen)) => r.digest != digest || r.resource_version != seen,
        // Never applied by this process, or not (yet) seen by the watch: deleted, relabelled,
        // or the watch has not listed it yet.
        _ => true,
    }
}

/// The digest of a body. `serde_json` maps are ordered, so equal objects give equal digests.
pub fn digest<K: Serialize>(obj: &K) -> Option<u64> {
    let bytes = serde_json::to_vec(obj).ok()?;
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

type Versions = Arc<dyn Fn(&str, &str) -> Option<String> + Send + Sync>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: String,
    namespace: String,
    name: String,
}

impl Key {
    fn of<K: Resource<DynamicType = ()>>(obj: &K) -> Self {
        Self {
            kind: K::kind(&()).into_owned(),
            namespace: obj.namespace().unwrap_or_default(),
            name: obj.name_any(),
        }
    }
}

/// The applies this process sent, and the watches that tell whether their objects changed since.
#[derive(Default)]
pub struct Applied {
    records: Mutex<HashMap<Key, Record>>,
    versions: RwLock<HashMap<String, Versions>>,
}

impl Applied {
    /// Whether `obj` must be applied; with the digest to [`Self::record`] once it was.
    pub fn check<K>(&self, obj: &K) -> (bool, Option<u64>)
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let Some(d) = digest(obj) else {
            return (true, None);
        };
        let key = Key::of(obj);
        let seen = self
            .versions
            .read()
            .ok()
            .and_then(|v| v.get(&key.kind).cloned())
            .and_then(|lookup| lookup(&key.namespace, &key.name));
        let last = self.records.lock().ok().and_then(|r| r.get(&key).cloned());
        (needs_apply(last.as_ref(), d, seen.as_deref()), Some(d))
    }

    /// Remembers what an apply of `obj` sent and what the API server answered.
    pub fn record<K>(&self, obj: &K, digest: Option<u64>, answered: &K)
    where
        K: Resource<DynamicType = ()>,
    {
        let (Some(digest), Some(rv)) = (digest, answered.resource_version()) else {
            return;
        };
        if let Ok(mut r) = self.records.lock() {
            r.insert(
                Key::of(obj),
                Record {
                    digest,
                    resource_version: rv,
                },
            );
        }
    }

    /// Forgets an object, so that its next apply is sent whatever the watch says.
    pub fn forget<K: Resource<DynamicType = ()>>(&self, obj: &K) {
        if let Ok(mut r) = self.records.lock() {
            r.remove(&Key::of(obj));
        }
    }

    /// Watches the metadata of Lifeboat's objects of kind `K` (those matching `selector`) in all
    /// namespaces, so that [`Self::check`] can tell whether they changed. Runs until dropped.
    pub fn watch<K>(
        self: &Arc<Self>,
        client: kube::Client,
        selector: &str,
    ) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let (reader, writer) = reflector::store::<PartialObjectMeta<K>>();
        let lookup: Versions = Arc::new(move |ns: &str, name: &str| {
            reader
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|o| o.metadata.resource_version.clone())
        });
        if let Ok(mut v) = self.versions.write() {
            v.insert(K::kind(&()).into_owned(), lookup);
        }
        let config = crate::observed::watch_config().labels(selector);
        // An Api over PartialObjectMeta asks for metadata only.
        watcher(Api::<PartialObjectMeta<K>>::all(client), config)
            .default_backoff()
            .modify(|o: &mut PartialObjectMeta<K>| keep_identity_and_version(&mut o.metadata))
            .reflect(writer)
            .for_each(|event| async move {
                if let Err(e) = event {
                    tracing::debug!(kind = %K::kind(&()), error = %e, "metadata watch of applied objects failed; retrying");
                }
            })
    }
}

/// All that [`Applied::check`] reads of a watched object. The rest of the metadata (managed
/// fields above all, several per object under server-side apply) was most of the operator's
/// memory at a thousand Clusters.
pub fn keep_identity_and_version(m: &mut kube::api::ObjectMeta) {
    *m = kube::api::ObjectMeta {
        name: m.name.take(),
        namespace: m.namespace.take(),
        resource_version: m.resource_version.take(),
        ..Default::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::collections::BTreeMap;

    fn record(digest: u64, rv: &str) -> Record {
        Record {
            digest,
            resource_version: rv.into(),
        }
    }

    #[test]
    fn the_same_body_on_an_unchanged_object_is_not_sent() {
        assert!(!needs_apply(Some(&record(7, "41")), 7, Some("41")));
    }

    #[test]
    fn a_new_body_an_object_changed_by_anyone_or_gone_is_sent() {
        // The spec changed: a new body.
        assert!(needs_apply(Some(&record(7, "41")), 8, Some("41")));
        // Someone else wrote the object since (an edit, a label, a status).
        assert!(needs_apply(Some(&record(7, "41")), 7, Some("42")));
        // Deleted, relabelled out of the watch, or not listed yet.
        assert!(needs_apply(Some(&record(7, "41")), 7, None));
        // Never applied by this process (a restart).
        assert!(needs_apply(None, 7, Some("41")));
        assert!(needs_apply(None, 7, None));
    }

    fn cm(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("k".to_owned(), value.to_owned())])),
            ..Default::default()
        }
    }

    #[test]
    fn a_watched_object_keeps_its_key_and_version_only() {
        let mut m = kube::api::ObjectMeta {
            name: Some("c-falkordb".into()),
            namespace: Some("ns".into()),
            resource_version: Some("41".into()),
            labels: Some(BTreeMap::from([("a".to_owned(), "b".to_owned())])),
            managed_fields: Some(vec![Default::default()]),
            ..Default::default()
        };
        keep_identity_and_version(&mut m);
        assert_eq!(
            m,
            kube::api::ObjectMeta {
                name: Some("c-falkordb".into()),
                namespace: Some("ns".into()),
                resource_version: Some("41".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn digests_follow_the_body() {
        assert_eq!(digest(&cm("a", "1")), digest(&cm("a", "1")));
        assert_ne!(digest(&cm("a", "1")), digest(&cm("a", "2")));
    }

    #[test]
    fn a_recorded_apply_is_skipped_only_while_the_watch_sees_its_version() {
        let applied = Arc::new(Applied::default());
        let current: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let seen = current.clone();
        applied.versions.write().expect("lock").insert(
            "ConfigMap".into(),
            Arc::new(move |_: &str, _: &str| seen.lock().expect("lock").clone()),
        );
        let desired = cm("a", "1");
        let (send, d) = applied.check(&desired);
        assert!(send, "never applied");
        let mut answered = desired.clone();
        answered.metadata.resource_version = Some("41".into());
        applied.record(&desired, d, &answered);
        // The watch has not seen it yet: sent again.
        assert!(applied.check(&desired).0);
        *current.lock().expect("lock") = Some("41".into());
        assert!(!applied.check(&desired).0, "unchanged: skipped");
        assert!(applied.check(&cm("a", "2")).0, "a new body is sent");
        *current.lock().expect("lock") = Some("42".into());
        assert!(applied.check(&desired).0, "changed by someone else");
        *current.lock().expect("lock") = Some("41".into());
        applied.forget(&desired);
        assert!(applied.check(&desired).0, "forgotten");
    }
}
