//! Checks a manifest against a generated CRD schema the way the API server would: structure
//! (unknown fields, types, enums, required fields, bounds, patterns) and then the CEL rules.
//!
//! It lets tests and `kubectl lifeboat validate` reject a bad manifest before it reaches a
//! cluster, with messages that name the field, as the API server's do.

use serde_json::Value;

use crate::crds;

/// One problem with a manifest: the field's path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field, for example `spec.componentSpecs[1].name`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a manifest could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("manifest has no apiVersion and kind")]
    NoKind,
    #[error("no CRD served by Lifeboat has apiVersion {api_version} and kind {kind}")]
    UnknownKind { api_version: String, kind: String },
}

/// Checks a manifest (as JSON) against the CRD for its apiVersion and kind. With `old`, the
/// transition rules (such as immutability) are checked as for an update.
pub fn check(manifest: &Value, old: Option<&Value>) -> Result<Vec<Violation>, CheckError> {
    let api_version = manifest.get("apiVersion").and_then(Value::as_str);
    let kind = manifest.get("kind").and_then(Value::as_str);
    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        return Err(CheckError::NoKind);
    };
    let schema = crds::all()
        .iter()
        .find(|crd| {
            crd.spec.names.kind == kind
                && crd
                    .spec
                    .versions
                    .iter()
                    .any(|v| format!("{}/{}", crd.spec.group, v.name) == api_version)
        })
        .and_then(crds::schema_of)
        .ok_or_else(|| CheckError::UnknownKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })?;
    let mut out = Vec::new();
    structural(&schema, manifest, "", &mut out);
    if out.is_empty() {
        // CEL runs on structurally valid objects only, as in the API server.
        if let Err(errors) = kube::core::cel::Validator::new().validate(&schema, manifest, old) {
            out.extend(errors.iter().map(|e| Violation {
                field: e.field_path.trim_start_matches('.').to_owned(),
                message: e.message.clone(),
            }));
        }
    }
    Ok(out)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn structural(schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
    let mut bad = |message: String| {
        out.push(Violation {
            field: path.to_owned(),
            message,
        })
    };
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) {
            bad("must not be null".into());
        }
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            bad(format!(
                "must be an integer or a string, not {}",
                type_name(value)
            ));
        }
        return;
    }
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(value);
        let ok = want == got || (want == "number" && got == "integer");
        if !ok {
            bad(format!("must be of type {want}, not {got}"));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let supported: Vec<String> = options.iter().map(Value::to_string).collect();
        bad(format!(
            "unsupported value {value}: supported values: {}",
            supported.join(", ")
        ));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                bad(format!("may not be longer than {max} characters"));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                bad(format!("must be at least {min} characters long"));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(s) => bad(format!("{s:?} does not match {p:?}")),
                    Ok(_) => {}
                    Err(e) => bad(format!("schema pattern {p:?} is invalid: {e}")),
                }
            }
        }
        Value::Number(n) => {
            if let (Some(min), Some(x)) =
                (schema.get("minimum").and_then(Value::as_f64), n.as_f64())
                && x < min
            {
                bad(format!("must be greater than or equal to {min}"));
            }
            if let (Some(max), Some(x)) =
                (schema.get("maximum").and_then(Value::as_f64), n.as_f64())
                && x > max
            {
                bad(format!("must be less than or equal to {max}"));
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                bad(format!("must have at most {max} items"));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                bad(format!("must have at least {min} items"));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    structural(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let opaque = properties.is_none() && additional.is_none();
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        out.push(Violation {
                            field: join(path, r),
                            message: "Required value".into(),
                        });
                    }
                }
            }
            for (k, v) in map {
                // The API server itself validates the root's type fields and metadata; a CRD
                // schema does not declare them.
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child = join(path, k);
                match (properties.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) => structural(s, v, &child, out),
                    (None, Some(a)) if a.is_object() => structural(a, v, &child, out),
                    (None, Some(Value::Bool(true))) => {}
                    _ if preserve || opaque => {}
                    _ => out.push(Violation {
                        field: child,
                        message: "field not declared in schema (unknown field)".into(),
                    }),
                }
            }
        }
        _ => {}
    }
}

/// Parses a YAML document into JSON, for callers that check manifests from files.
pub fn yaml_to_json(text: &str) -> Result<Value, serde_yaml::Error> {
    serde_yaml::from_str(text)
}
