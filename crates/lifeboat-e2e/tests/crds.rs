//! The generated CRDs on a real API server: the field report's manifests are accepted as
//! written, and bad input is rejected by the server with a message that names the field.

use anyhow::{Result, bail, ensure};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use lifeboat_api::{Backup, Cluster};
use lifeboat_e2e::in_namespace;
use serde_json::{Value, json};

fn fixture(name: &str) -> Result<Value> {
    let path = format!(
        "{}/../lifeboat-api/tests/fixtures/field-report/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path)?;
    // The fixtures are YAML; read them with the API crate's own parser.
    Ok(lifeboat_api::schema_check::yaml_to_json(&text)?)
}

async fn dry_run_create<K>(
    api: &Api<K>,
    mut v: Value,
    ns: &str,
) -> Result<std::result::Result<(), String>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    v["metadata"]["namespace"] = json!(ns);
    let obj: K = serde_json::from_value(v)?;
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&pp, &obj).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) => Ok(Err(s.message)),
        Err(e) => bail!("dry-run create failed unexpectedly: {e}"),
    }
}

#[tokio::test]
async fn field_report_manifests_are_accepted_as_written() -> Result<()> {
    in_namespace("crds-accept", |ns| async move {
        let clusters: Api<Cluster> = ns.api();
        for f in [
            "cluster-restore-annotation.yaml",
            "cluster-spec-restore.yaml",
        ] {
            let r = dry_run_create(&clusters, fixture(f)?, &ns.name).await?;
            ensure!(r.is_ok(), "{f} rejected by the API server: {r:?}");
        }
        let backups: Api<Backup> = ns.api();
        let r = dry_run_create(&backups, fixture("backup.yaml")?, &ns.name).await?;
        ensure!(r.is_ok(), "backup.yaml rejected by the API server: {r:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field() -> Result<()> {
    in_namespace("crds-reject", |ns| async move {
        let clusters: Api<Cluster> = ns.api();
        let mut v = fixture("cluster-spec-restore.yaml")?;
        v["spec"]["terminationPolicy"] = json!("Halt");
        // The typed client cannot even build this object; send it untyped.
        let dynamic: Api<kube::api::DynamicObject> = Api::namespaced_with(
            ns.client.clone(),
            &ns.name,
            &kube::api::ApiResource::erase::<Cluster>(&()),
        );
        let mut bad = v.clone();
        bad["metadata"]["namespace"] = json!(ns.name);
        let obj: kube::api::DynamicObject = serde_json::from_value(bad)?;
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        match dynamic.create(&pp, &obj).await {
            Err(kube::Error::Api(s)) => ensure!(
                s.message.contains("spec.terminationPolicy") && s.message.contains("Halt"),
                "message: {}",
                s.message
            ),
            other => bail!("an unknown terminationPolicy was accepted: {other:?}"),
        }
        let mut v = fixture("cluster-restore-annotation.yaml")?;
        v["spec"]["componentSpecs"][1]["name"] = json!("falkordb");
        match dry_run_create(&clusters, v, &ns.name).await? {
            Err(m) => ensure!(
                m.contains("componentSpecs") && m.contains("unique"),
                "message: {m}"
            ),
            Ok(()) => bail!("two components named alike were accepted"),
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn changing_spec_restore_is_rejected_by_the_server() -> Result<()> {
    in_namespace("crds-immutable", |ns| async move {
        let clusters: Api<Cluster> = ns.api();
        let mut v = fixture("cluster-spec-restore.yaml")?;
        v["metadata"]["namespace"] = json!(ns.name);
        let c: Cluster = serde_json::from_value(v)?;
        clusters.create(&PostParams::default(), &c).await?;
        let patch = json!({"spec": {"restore": {"source": {"apiGroup": "dataprotection.kubeblocks.io", "kind": "Backup", "name": "another"}}}});
        match clusters.patch("fdb-r2", &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) => ensure!(s.message.contains("spec.restore is immutable"), "message: {}", s.message),
            other => bail!("changing spec.restore was accepted: {other:?}"),
        }
        Ok(())
    })
    .await
}
