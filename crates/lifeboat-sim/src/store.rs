//! The objects the simulated API server holds, and what the API server itself does to them:
//! resourceVersions, UIDs, generations, finalizers and deletion, garbage collection.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// Where an object lives: its API version, resource (plural), namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub api_version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{} {ns}/{}", self.api_version, self.plural, self.name),
            None => write!(f, "{}/{} {}", self.api_version, self.plural, self.name),
        }
    }
}

/// A refusal, as the API server words it in a `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn not_found(key: &Key) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{}\" not found", key.plural, key.name),
        }
    }
    fn already_exists(key: &Key) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{}\" already exists", key.plural, key.name),
        }
    }
    fn conflict(key: &Key) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                key.plural, key.name
            ),
        }
    }
    pub fn invalid(message: String) -> Self {
        ApiError {
            code: 422,
            reason: "Invalid",
            message,
        }
    }

    /// The body of the error response.
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}

pub type Result<T> = std::result::Result<T, ApiError>;

/// The store. Deterministic: UIDs and resourceVersions count up, and time is the simulation's.
#[derive(Clone, Debug, Default)]
pub struct Store {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    uids: u64,
    /// Seconds since the Unix epoch; advanced by the harness.
    pub now: i64,
    /// Pod logs, by namespace and pod name.
    pub logs: BTreeMap<(String, String), String>,
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable!("metadata was just made an object"),
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str()
}

/// Everything but metadata and status: what a generation counts changes of.
/// Whether maps `a` and `b` are equal in every field but those in `skip`, without copying
/// either (a write compares whole objects, and objects are most of what the simulation moves).
fn maps_equal_except(a: &Map<String, Value>, b: &Map<String, Value>, skip: &[&str]) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

fn equal_except(a: &Value, b: &Value, skip: &[&str]) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => maps_equal_except(a, b, skip),
        _ => a == b,
    }
}

/// Whether anything but metadata and status differs: what bumps the generation.
fn spec_changed(old: &Value, new: &Value) -> bool {
    !equal_except(old, new, &["metadata", "status"])
}

impl Store {
    pub fn timestamp(&self) -> String {
        jiff::Timestamp::from_second(self.now)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Every object of a resource, in one namespace or all.
    pub fn list(&self, api_version: &str, plural: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|(k, _)| {
                k.api_version == api_version
                    && k.plural == plural
                    && (namespace.is_none() || k.namespace.as_deref() == namespace)
            })
            .map(|(_, v)| v)
            .collect()
    }

    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.objects.keys()
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// POST: the object gets its UID, resourceVersion, generation and creation time.
    pub fn create(&mut self, key: &Key, mut obj: Value) -> Result<Value> {
        if self.objects.contains_key(key) {
            return Err(ApiError::already_exists(key));
        }
        if key.name.is_empty() || key.name.len() > 253 {
            return Err(ApiError::invalid(format!(
                "{} \"{}\" is invalid: metadata.name: must be 1 to 253 characters",
                key.plural, key.name
            )));
        }
        if key.plural == "secrets" {
            string_data_into_data(&mut obj);
        }
        self.uids += 1;
        // Distinct in the first eight characters as real UIDs are: Lifeboat names a Backup's
        // data by them, and UIDs alike there would make every Backup of a name look the same.
        let uid = format!(
            "{:08x}-0000-4000-8000-{:012}",
            self.uids.wrapping_mul(0x9e37_79b9) as u32,
            self.uids
        );
        let rv = self.next_revision();
        let now = self.timestamp();
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(key.name));
        if let Some(ns) = &key.namespace {
            m.insert("namespace".into(), json!(ns));
        }
        m.insert("uid".into(), json!(uid));
        m.insert("resourceVersion".into(), json!(rv));
        m.insert("generation".into(), json!(1));
        m.insert("creationTimestamp".into(), json!(now));
        m.remove("deletionTimestamp");
        self.objects.insert(key.clone(), obj.clone());
        Ok(obj)
    }

    /// Takes an object out to be written: [`Store::store`] puts it back, changed or not (taking
    /// it out spares a copy of every object written).
    fn take(&mut self, key: &Key) -> Result<Value> {
        self.objects
            .remove(key)
            .ok_or_else(|| ApiError::not_found(key))
    }

    /// Stores a changed object, taken out with [`Store::take`]: a new resourceVersion, the
    /// generation bumped when anything but metadata and status changed, and the object removed
    /// if it is deleting and its last finalizer went.
    fn store(&mut self, key: &Key, old: Value, mut new: Value) -> Value {
        let old = &old;
        if key.plural == "secrets" {
            string_data_into_data(&mut new);
        }
        let om = meta(old).cloned().unwrap_or_default();
        let generation = om.get("generation").and_then(Value::as_i64).unwrap_or(1);
        let bumped = spec_changed(old, &new);
        let rv = self.next_revision();
        let m = meta_mut(&mut new);
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "name",
            "namespace",
        ] {
            match om.get(f) {
                Some(v) => m.insert(f.into(), v.clone()),
                None => m.remove(f),
            };
        }
        m.insert("resourceVersion".into(), json!(rv));
        m.insert(
            "generation".into(),
            json!(if bumped { generation + 1 } else { generation }),
        );
        // As the API server: a write that changes nothing is no write, and keeps the
        // resourceVersion (a precondition on it still holds afterwards).
        let same_meta = match (meta(old), meta(&new)) {
            (Some(a), Some(b)) => maps_equal_except(a, b, &["resourceVersion"]),
            _ => false,
        };
        if same_meta && equal_except(old, &new, &["metadata"]) {
            self.objects.insert(key.clone(), old.clone());
            return old.clone();
        }
        let m = meta_mut(&mut new);
        let finalizers_left = m
            .get("finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if om.contains_key("deletionTimestamp") && !finalizers_left {
            // Gone (it was taken out): the removal is a revision of its own, as in remove().
            self.next_revision();
        } else {
            self.objects.insert(key.clone(), new.clone());
        }
        new
    }

    /// PUT: replaces the object; a stale resourceVersion is a conflict.
    pub fn replace(&mut self, key: &Key, new: Value, status_only: bool) -> Result<Value> {
        let current = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::not_found(key))?;
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && Some(rv) != meta_str(current, "resourceVersion")
        {
            return Err(ApiError::conflict(key));
        }
        let old = self.take(key)?;
        let merged = written_part(&old, new, status_only);
        Ok(self.store(key, old, merged))
    }

    /// PATCH with a merge patch (RFC 7386), or with server-side apply: applied fields replace
    /// what is there, which is what matters for one field manager. Apply creates.
    pub fn merge(
        &mut self,
        key: &Key,
        patch: &Value,
        status_only: bool,
        apply: bool,
    ) -> Result<Value> {
        let Some(current) = self.objects.get(key) else {
            if !apply || status_only {
                return Err(ApiError::not_found(key));
            }
            let mut obj = patch.clone();
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
            return self.create(key, obj);
        };
        if let Some(rv) = meta_str(patch, "resourceVersion")
            && Some(rv) != meta_str(current, "resourceVersion")
        {
            return Err(ApiError::conflict(key));
        }
        let old = self.take(key)?;
        let mut new = old.clone();
        if status_only {
            let mut s = old.get("status").cloned().unwrap_or(json!({}));
            let p = patch.get("status").unwrap_or(&Value::Null);
            if apply {
                apply_merge(&mut s, p);
            } else {
                json_patch::merge(&mut s, p);
            }
            new["status"] = s;
        } else {
            let mut p = patch.clone();
            if let Some(m) = p.as_object_mut() {
                m.remove("status");
            }
            if apply {
                apply_merge(&mut new, &p);
            } else {
                json_patch::merge(&mut new, &p);
            }
        }
        Ok(self.store(key, old, new))
    }

    /// PATCH with a JSON patch (RFC 6902).
    pub fn json_patch(&mut self, key: &Key, ops: &Value, status_only: bool) -> Result<Value> {
        let current = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::not_found(key))?;
        let ops: json_patch::Patch = serde_json::from_value(ops.clone())
            .map_err(|e| ApiError::invalid(format!("json patch: {e}")))?;
        let mut new = current.clone();
        json_patch::patch(&mut new, &ops)
            .map_err(|e| ApiError::invalid(format!("json patch: {e}")))?;
        let old = self.take(key)?;
        let new = written_part(&old, new, status_only);
        Ok(self.store(key, old, new))
    }

    /// DELETE: an object with finalizers gets its deletion timestamp and stays until they are
    /// removed; otherwise it goes, and its dependents are collected.
    pub fn delete(&mut self, key: &Key) -> Result<Value> {
        let mut obj = self
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(key))?;
        let has_finalizers = meta(&obj)
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if meta_str(&obj, "deletionTimestamp").is_none() {
                let now = self.timestamp();
                let rv = self.next_revision();
                let m = meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(now));
                m.insert("resourceVersion".into(), json!(rv));
                self.objects.insert(key.clone(), obj.clone());
            }
            return Ok(obj);
        }
        self.remove(key);
        Ok(obj)
    }

    /// Removes an object. Its dependents stay until the garbage collector runs
    /// ([`crate::world::collect_garbage`]), as they do on a real cluster for a while.
    fn remove(&mut self, key: &Key) {
        if self.objects.remove(key).is_some() {
            self.next_revision();
        }
    }

    /// Writes an object as a controller outside Lifeboat would (the StatefulSet controller, the
    /// kubelet, a user): no concurrency check.
    pub fn put(&mut self, key: &Key, obj: Value) -> Value {
        match self.take(key) {
            Ok(old) => self.store(key, old, obj),
            Err(_) => self.create(key, obj).unwrap_or(Value::Null),
        }
    }
}

/// Server-side apply as one field manager sees it: applied fields replace what is there,
/// except lists keyed by `type` (conditions), which merge entry by entry, as their schema's
/// `x-kubernetes-list-map-keys` makes them.
fn apply_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    apply_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (Value::Array(t), Value::Array(p))
            if p.iter()
                .chain(t.iter())
                .all(|e| e.get("type").is_some_and(Value::is_string)) =>
        {
            for e in p {
                match t.iter_mut().find(|x| x.get("type") == e.get("type")) {
                    Some(x) => *x = e.clone(),
                    None => t.push(e.clone()),
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// A Secret's `stringData` is write-only: the API server moves it into `data`, base64-encoded.
fn string_data_into_data(obj: &mut Value) {
    use base64::Engine as _;
    let Some(m) = obj.as_object_mut() else { return };
    let Some(Value::Object(sd)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let text = v.as_str().unwrap_or_default().to_owned();
            d.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

/// What a whole-object write (PUT, JSON patch) may change: through the status subresource only
/// the status, through the main resource everything but the status.
fn written_part(old: &Value, new: Value, status_only: bool) -> Value {
    if status_only {
        let mut o = old.clone();
        o["status"] = new.get("status").cloned().unwrap_or(Value::Null);
        o
    } else {
        keep_status(old, new)
    }
}

/// A replace of the main resource keeps the stored status: it is written through its
/// subresource only.
fn keep_status(old: &Value, mut new: Value) -> Value {
    if let Some(m) = new.as_object_mut() {
        match old.get("status") {
            Some(s) => m.insert("status".into(), s.clone()),
            None => m.remove("status"),
        };
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            api_version: "v1".into(),
            plural: "configmaps".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    #[test]
    fn deleting_an_owner_collects_its_dependents_and_finalizers_hold_an_object() {
        let mut s = Store::default();
        let owner = s.create(&key("owner"), json!({})).expect("created");
        let uid = owner["metadata"]["uid"].clone();
        s.create(
            &key("dep"),
            json!({"metadata": {"ownerReferences": [{"uid": uid, "name": "owner"}]}}),
        )
        .expect("created");
        s.create(&key("held"), json!({"metadata": {"finalizers": ["x"]}}))
            .expect("created");
        s.delete(&key("owner")).expect("deleted");
        assert!(
            s.get(&key("dep")).is_some(),
            "dependents stay until the collector runs"
        );
        crate::world::collect_garbage(&mut s);
        assert!(s.get(&key("dep")).is_none(), "the dependent was collected");
        let held = s.delete(&key("held")).expect("marked");
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        assert!(
            s.get(&key("held")).is_some(),
            "a finalizer holds the object"
        );
        s.merge(
            &key("held"),
            &json!({"metadata": {"finalizers": null}}),
            false,
            false,
        )
        .expect("patched");
        assert!(
            s.get(&key("held")).is_none(),
            "the last finalizer's removal deletes it"
        );
    }

    #[test]
    fn a_stale_resource_version_conflicts_and_generation_counts_spec_changes() {
        let mut s = Store::default();
        let a = s
            .create(&key("a"), json!({"data": {"k": "1"}}))
            .expect("created");
        let rv = a["metadata"]["resourceVersion"].clone();
        let b = s
            .merge(&key("a"), &json!({"data": {"k": "2"}}), false, true)
            .expect("applied");
        assert_eq!(b["metadata"]["generation"], json!(2));
        let c = s
            .merge(
                &key("a"),
                &json!({"metadata": {"labels": {"l": "v"}}}),
                false,
                false,
            )
            .expect("patched");
        assert_eq!(
            c["metadata"]["generation"],
            json!(2),
            "metadata is not spec"
        );
        let stale = json!({"metadata": {"resourceVersion": rv}, "data": {"k": "3"}});
        assert_eq!(
            s.replace(&key("a"), stale, false).map_err(|e| e.code),
            Err(409)
        );
        let status = s
            .merge(
                &key("a"),
                &json!({"status": {"phase": "Ok"}, "data": {"k": "9"}}),
                true,
                false,
            )
            .expect("status written");
        assert_eq!(status["status"]["phase"], json!("Ok"));
        assert_eq!(
            status["data"]["k"],
            json!("2"),
            "the status subresource writes status only"
        );
    }
}
