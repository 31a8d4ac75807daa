//! The proofs Lifeboat asks for before it deletes anything (docs/architecture.md, "What Lifeboat
//! deletes"): an owner reference to the UID of the object the delete is for, or a Lifeboat label
//! carrying that UID. A label that third parties also set (`app.kubernetes.io/*`) is never proof
//! on its own: a Helm release of the same name sets the same value.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Whether `meta` carries an owner reference to the object with `uid`.
pub fn owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    if crate::mutation::active(crate::mutation::Mutation::SkipUidCheck) {
        return true;
    }
    !uid.is_empty() && meta.owner_references.iter().flatten().any(|o| o.uid == uid)
}

/// Whether `meta`'s controller (the owner reference marked `controller`) is the object with
/// `uid`.
pub fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    if crate::mutation::active(crate::mutation::Mutation::SkipUidCheck) {
        return true;
    }
    !uid.is_empty()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The value of label `key`, if set.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether label `key` carries `uid`.
pub fn labelled(meta: &ObjectMeta, key: &str, uid: &str) -> bool {
    if crate::mutation::active(crate::mutation::Mutation::SkipUidCheck) {
        return true;
    }
    !uid.is_empty() && label(meta, key) == Some(uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn meta(owner: Option<(&str, bool)>, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            owner_references: owner.map(|(uid, controller)| {
                vec![OwnerReference {
                    uid: uid.into(),
                    controller: Some(controller),
                    ..Default::default()
                }]
            }),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn an_empty_uid_proves_nothing() {
        let m = meta(Some(("", true)), &[("k", "")]);
        assert!(!owned_by(&m, ""));
        assert!(!controlled_by(&m, ""));
        assert!(!labelled(&m, "k", ""));
    }

    #[test]
    fn owner_and_label_must_carry_the_uid() {
        let m = meta(Some(("u1", false)), &[("k", "u1")]);
        assert!(owned_by(&m, "u1"));
        assert!(!controlled_by(&m, "u1"), "not the controller");
        assert!(!owned_by(&m, "u2"));
        assert!(labelled(&m, "k", "u1"));
        assert!(!labelled(&m, "k", "u2"));
        assert!(!labelled(&m, "other", "u1"));
    }
}
