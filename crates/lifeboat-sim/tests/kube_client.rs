//! kube's own client against the simulated API server: what the controllers call must mean here
//! what it means on a real API server, or a simulation proves nothing about them.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use lifeboat_sim::{ApiServer, Fault, Key};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .expect("a ConfigMap")
}

#[tokio::test]
async fn create_get_list_apply_and_delete_mean_what_they_mean_on_a_real_server() {
    let server = ApiServer::default();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "demo");
    let pp = PostParams::default();
    let a = api
        .create(&pp, &cm("a", json!({"app": "db"})))
        .await
        .expect("created");
    assert!(a.metadata.uid.is_some() && a.metadata.resource_version.is_some());
    let again = api.create(&pp, &cm("a", json!({}))).await;
    assert!(
        matches!(&again, Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists"),
        "{again:?}"
    );
    api.create(&pp, &cm("b", json!({"app": "other"})))
        .await
        .expect("created");
    let listed = api
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("listed");
    assert_eq!(
        listed
            .items
            .iter()
            .map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec![Some("a".to_owned())]
    );
    let applied = api
        .patch(
            "a",
            &PatchParams::apply("lifeboat").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "w"}})),
        )
        .await
        .expect("applied");
    assert_eq!(
        applied.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("w")
    );
    let created_by_apply = api
        .patch(
            "c",
            &PatchParams::apply("lifeboat"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            ),
        )
        .await
        .expect("apply creates");
    assert!(created_by_apply.metadata.uid.is_some());
    api.delete("a", &DeleteParams::default())
        .await
        .expect("deleted");
    let gone = api.get_opt("a").await.expect("read");
    assert!(gone.is_none());
}

#[tokio::test]
async fn faults_refuse_time_out_and_crash_the_operator_until_it_restarts() {
    let server = ApiServer::default();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "demo");
    let mut plan = vec![Fault::Status(500), Fault::Timeout, Fault::Crash].into_iter();
    server.set_faults(Some(Box::new(move |_| plan.next().unwrap_or(Fault::None))));
    let pp = PostParams::default();
    let refused = api.create(&pp, &cm("a", json!({}))).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 500),
        "{refused:?}"
    );
    assert!(
        server.with_store(|s| s.keys().count()) == 0,
        "a refused request changes nothing"
    );
    let timed_out = api.create(&pp, &cm("a", json!({}))).await;
    assert!(timed_out.is_err());
    assert_eq!(
        server.with_store(|s| s.keys().count()),
        1,
        "a timed-out request was applied, its response lost"
    );
    assert!(api.get("a").await.is_err(), "the crash fails this request");
    assert!(server.crashed());
    assert!(api.get("a").await.is_err(), "and every later one");
    server.restart();
    assert!(api.get("a").await.is_ok(), "a restarted operator is served");
    let trace = server.take_trace();
    assert_eq!(trace.iter().filter(|r| r.write).count(), 2, "{trace:?}");
}

#[tokio::test]
async fn status_and_logs_subresources_and_garbage_collection() {
    let server = ApiServer::default();
    let pods: Api<Pod> = Api::namespaced(server.client(), "demo");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-0"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }))
    .expect("a Pod");
    let p = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("created");
    let owner_uid = p.metadata.uid.clone().expect("uid");
    let st = pods
        .patch_status(
            "p-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("status patched");
    assert_eq!(st.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    server.with_store(|s| {
        s.logs
            .insert(("demo".into(), "p-0".into()), "{\"match\":true}\n".into())
    });
    let log = pods.logs("p-0", &LogParams::default()).await.expect("log");
    assert_eq!(log, "{\"match\":true}\n");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "demo");
    let mut dep = cm("dep", json!({}));
    dep.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p-0".into(),
            uid: owner_uid,
            ..Default::default()
        },
    ]);
    cms.create(&PostParams::default(), &dep)
        .await
        .expect("created");
    pods.delete("p-0", &DeleteParams::default())
        .await
        .expect("deleted");
    server.with_store(lifeboat_sim::world::collect_garbage);
    let key = Key {
        api_version: "v1".into(),
        plural: "configmaps".into(),
        namespace: Some("demo".into()),
        name: "dep".into(),
    };
    assert!(
        server.with_store(|s| s.get(&key).is_none()),
        "the dependent was collected"
    );
}
