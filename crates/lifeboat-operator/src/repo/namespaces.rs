//! Which namespaces a BackupRepo serves, and where it has left copies.
//!
//! A repo's credentials reach only the namespaces it allows (annotation
//! [`ALLOWED_NAMESPACES`], a Lifeboat extension; without it every namespace, as with KubeBlocks).
//! Each namespace a credential copy is made in is recorded on the repo first
//! ([`COPY_PREFIX`]`<namespace>`), so that the sweep that removes copies from namespaces no longer
//! using the repo finds them by name, without listing Secrets across the cluster: a list of
//! Secrets would hand the operator every Secret's contents.

use std::collections::BTreeSet;

use kube::ResourceExt;
use lifeboat_api::BackupRepo;

/// The annotation that limits a repo to some namespaces: a comma-separated list of names, each
/// a namespace or a prefix ending in `*`; `*` alone allows every namespace.
pub const ALLOWED_NAMESPACES: &str = "lifeboat.io/allowed-namespaces";

/// The prefix of the annotations that record a namespace holding a credential copy of the repo:
/// `copies.lifeboat.io/<namespace>`, valued with the time the copy was first made.
pub const COPY_PREFIX: &str = "copies.lifeboat.io/";

/// Whether `repo` serves `namespace`; the refusal names the repo, the namespace and the
/// annotation that decides it.
pub fn allows(repo: &BackupRepo, namespace: &str) -> Result<(), String> {
    let Some(list) = repo.annotations().get(ALLOWED_NAMESPACES) else {
        return Ok(());
    };
    let allowed = list
        .split(',')
        .map(str::trim)
        .any(|p| match p.strip_suffix('*') {
            Some(prefix) => namespace.starts_with(prefix),
            None => p == namespace,
        });
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "BackupRepo {} does not serve namespace {namespace}: its annotation \
             {ALLOWED_NAMESPACES} allows {list:?}",
            repo.name_any()
        ))
    }
}

/// The annotation key that records a copy in `namespace`.
pub fn copy_key(namespace: &str) -> String {
    format!("{COPY_PREFIX}{namespace}")
}

/// The namespaces `repo` has recorded copies in.
pub fn recorded(repo: &BackupRepo) -> BTreeSet<String> {
    repo.annotations()
        .keys()
        .filter_map(|k| k.strip_prefix(COPY_PREFIX))
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_api::dataprotection::v1alpha1::BackupRepoSpec;

    fn repo(annotations: &[(&str, &str)]) -> BackupRepo {
        let mut r = BackupRepo::new("s3", BackupRepoSpec::default());
        r.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        r
    }

    #[test]
    fn a_repo_serves_every_namespace_unless_its_annotation_says_otherwise() {
        assert_eq!(allows(&repo(&[]), "anything"), Ok(()));
        let r = repo(&[(ALLOWED_NAMESPACES, "prod, team-*")]);
        assert_eq!(allows(&r, "prod"), Ok(()));
        assert_eq!(allows(&r, "team-a"), Ok(()));
        let e = allows(&r, "production").expect_err("not listed");
        assert!(
            e.contains("BackupRepo s3")
                && e.contains("production")
                && e.contains(ALLOWED_NAMESPACES),
            "{e}"
        );
        assert_eq!(allows(&repo(&[(ALLOWED_NAMESPACES, "*")]), "x"), Ok(()));
    }

    #[test]
    fn recorded_copies_are_read_back_from_their_keys() {
        let r = repo(&[
            (&copy_key("a"), "t"),
            (&copy_key("b"), "t"),
            ("other.io/x", "y"),
        ]);
        assert_eq!(
            recorded(&r),
            ["a".to_owned(), "b".to_owned()].into_iter().collect()
        );
    }
}
