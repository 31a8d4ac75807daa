//! The few ways Lifeboat writes to the API: server-side apply under one field manager, status
//! through the status subresource, and create-if-absent for objects that must never be
//! regenerated (passwords).

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::FIELD_MANAGER;
use crate::error::{Error, Result};

fn describe<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{} in namespace {}",
        K::kind(&()),
        obj.name_any(),
        obj.namespace().unwrap_or_default()
    )
}

/// Server-side applies `obj` (which must carry its name and namespace), forcing ownership of the
/// fields Lifeboat sets.
pub async fn apply<K>(client: &kube::Client, obj: &K) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&obj.name_any(), &pp, &Patch::Apply(obj))
        .await
        .map_err(Error::kube("applying", describe(obj)))
}

/// Applies `obj` unless it is what Lifeboat last applied and nobody changed the object since
/// ([`crate::applied`]); `None` when nothing was sent.
pub async fn apply_changed<K>(
    client: &kube::Client,
    applied: &crate::applied::Applied,
    obj: &K,
) -> Result<Option<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let (send, digest) = applied.check(obj);
    if !send {
        return Ok(None);
    }
    let answered = apply(client, obj).await?;
    applied.record(obj, digest, &answered);
    Ok(Some(answered))
}

/// The last lines of a pod's log, where the mover prints its result line. Whole, not just the
/// last line: the mover may log after its result, and readers pick the line whose shape they
/// expect (`mover_output::last`). `None` when the log cannot be read or is empty.
pub async fn log_tail(client: &kube::Client, ns: &str, pod: &str) -> Option<String> {
    let lp = kube::api::LogParams {
        tail_lines: Some(40),
        ..Default::default()
    };
    let logs = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .logs(pod, &lp)
        .await
        .ok()?;
    (!logs.trim().is_empty()).then_some(logs)
}

/// A finished Job pod's result lines: the termination message of a pod that succeeded, where the
/// mover writes them (no request through the API server to the node, and kept after the log
/// is gone), else the log's tail (a mover too old to write it, or results too long for a
/// message). A failed pod's message is its log's tail cut to the kubelet's limit, so its log is
/// read whole instead.
pub async fn job_output(
    client: &kube::Client,
    ns: &str,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Option<String> {
    if let Some(m) = succeeded_result_message(pod) {
        return Some(m);
    }
    log_tail(client, ns, &pod.name_any()).await
}

/// The termination message of a pod that succeeded, when it holds a JSON object line.
pub fn succeeded_result_message(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let succeeded = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
    let m = termination_message(Some(pod));
    let holds_result = m
        .lines()
        .any(|l| serde_json::from_str::<serde_json::Value>(l.trim()).is_ok_and(|v| v.is_object()));
    (succeeded && holds_result).then_some(m)
}

/// Sets the finalizers of a namespaced object as a compare-and-swap on the resourceVersion it was
/// read at: a finalizer another controller added in between is never dropped, and the conflict
/// is retried by the caller's next reconcile with a fresh read.
pub async fn set_finalizers<K>(
    client: &kube::Client,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}
    });
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("updating finalizers of", describe(obj)))?;
    Ok(())
}

/// Creates `obj` unless an object of that name exists; returns whether it created it.
pub async fn create_if_absent<K>(client: &kube::Client, obj: &K) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(Error::kube("creating", describe(obj))(e)),
    }
}

/// Server-side applies the status of a namespaced object.
pub async fn apply_status<K>(
    client: &kube::Client,
    name: &str,
    ns: &str,
    status: serde_json::Value,
) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": ns},
        "status": status,
    });
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(name, &pp, &Patch::Apply(&body))
        .await
        .map_err(Error::kube(
            "updating status of",
            format!("{}/{name} in namespace {ns}", K::kind(&())),
        ))?;
    Ok(())
}

/// Reads a namespaced object, `None` when it does not exist.
pub async fn get_opt<K>(client: &kube::Client, ns: &str, name: &str) -> Result<Option<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.map_err(Error::kube(
        "reading",
        format!("{}/{name} in namespace {ns}", K::kind(&())),
    ))
}

/// Lists namespaced objects by label selector.
pub async fn list<K>(client: &kube::Client, ns: &str, selector: &str) -> Result<Vec<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(selector);
    Ok(api
        .list(&lp)
        .await
        .map_err(Error::kube(
            "listing",
            format!("{} with {selector} in namespace {ns}", K::kind(&())),
        ))?
        .items)
}

/// The termination message of a pod's first terminated container: with
/// `terminationMessagePolicy: FallbackToLogsOnError`, the tail of a failed Job's output.
pub fn termination_message(pod: Option<&k8s_openapi::api::core::v1::Pod>) -> String {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        })
        .unwrap_or_default()
}

/// Whether every container of a pod runs (so its init containers have finished).
pub fn containers_running(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            !cs.is_empty()
                && cs
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// Suspends a Job: the Job controller stops its pods and starts none again. The Job object stays,
/// with its conditions and events, for `kubectl describe`.
pub async fn suspend_job(client: &kube::Client, ns: &str, name: &str) -> Result<()> {
    let patch = serde_json::json!({"spec": {"suspend": true}});
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("suspending", format!("Job {ns}/{name}")))?;
    Ok(())
}

/// Whether a Job has ended: succeeded, or with a `Failed` or `Complete` condition. An ended Job
/// runs no pod that could still write.
pub fn job_finished(job: &k8s_openapi::api::batch::v1::Job) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.succeeded.unwrap_or(0) > 0
            || s.conditions
                .iter()
                .flatten()
                .any(|c| (c.type_ == "Failed" || c.type_ == "Complete") && c.status == "True")
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
    };

    use super::succeeded_result_message;

    fn pod(phase: &str, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "backup".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            message: Some(message.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_result_is_read_from_the_message_of_a_pod_that_succeeded_only() {
        let line = "{\"backupName\":\"b-1234abcd\"}\n";
        assert_eq!(
            succeeded_result_message(&pod("Succeeded", line)).as_deref(),
            Some(line)
        );
        // A failed pod's message is its log's tail, cut by the kubelet: the log is read instead.
        assert_eq!(succeeded_result_message(&pod("Failed", line)), None);
        // An older mover writes no message; text that holds no result line is not one either.
        assert_eq!(succeeded_result_message(&pod("Succeeded", "")), None);
        assert_eq!(
            succeeded_result_message(&pod("Succeeded", "done\n[1,2]\n")),
            None
        );
    }
}
