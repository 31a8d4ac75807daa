//! The REST paths kube's `Api` builds, read back into what they address.

/// What one request path addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `v1` for the core group, else `group/version`.
    pub api_version: String,
    pub plural: String,
    /// `None` for cluster-scoped objects and for lists across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `status`, `log`, ...
    pub subresource: Option<String>,
}

/// Reads `/api/v1/...` and `/apis/{group}/{version}/...`; `None` for anything else.
pub fn parse(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ((*v).to_owned(), rest),
        ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, more @ ..] => (Some((*ns).to_owned()), {
            let mut v = vec![*plural];
            v.extend_from_slice(more);
            v
        }),
        other => (None, other.to_vec()),
    };
    let mut it = rest.into_iter();
    let plural = it.next()?.to_owned();
    let name = it.next().map(str::to_owned);
    let subresource = it.next().map(str::to_owned);
    if it.next().is_some() {
        return None;
    }
    Some(Target {
        api_version,
        plural,
        namespace,
        name,
        subresource,
    })
}

/// Whether `labels` satisfy an equality-based selector (`a=b`, `a==b`, `a!=b`, `a`, `!a`),
/// the only kind the controllers send.
pub fn selector_matches(
    selector: &str,
    labels: &serde_json::Map<String, serde_json::Value>,
) -> bool {
    let get = |k: &str| labels.get(k).and_then(serde_json::Value::as_str);
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                get(k.trim()) != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k.trim()) == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                get(k.trim()).is_none()
            } else {
                get(term).is_some()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_core_group_and_cluster_scoped_paths() {
        let t = parse("/api/v1/namespaces/demo/pods/p-0/log").expect("parses");
        assert_eq!(
            (
                t.api_version.as_str(),
                t.plural.as_str(),
                t.namespace.as_deref()
            ),
            ("v1", "pods", Some("demo"))
        );
        assert_eq!(
            (t.name.as_deref(), t.subresource.as_deref()),
            (Some("p-0"), Some("log"))
        );
        let t = parse("/apis/dataprotection.kubeblocks.io/v1alpha1/backuprepos/r/status")
            .expect("parses");
        assert_eq!(t.namespace, None);
        assert_eq!(t.api_version, "dataprotection.kubeblocks.io/v1alpha1");
        assert_eq!(
            (t.name.as_deref(), t.subresource.as_deref()),
            (Some("r"), Some("status"))
        );
        let t = parse("/apis/apps/v1/statefulsets").expect("parses");
        assert_eq!((t.namespace, t.name), (None, None));
        assert_eq!(parse("/version"), None);
    }

    #[test]
    fn equality_selectors() {
        let labels = serde_json::json!({"app": "db", "role": "primary"});
        let l = labels.as_object().expect("object");
        assert!(selector_matches("app=db,role==primary", l));
        assert!(selector_matches("app, !gone, role!=replica", l));
        assert!(!selector_matches("app=db,role=replica", l));
        assert!(!selector_matches("!app", l));
        assert!(selector_matches("", l));
    }
}
