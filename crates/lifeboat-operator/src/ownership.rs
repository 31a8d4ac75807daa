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

/// The UID of the other object of kind `kind` that controls `meta`, when it is not the one
/// with `uid`: an object an earlier Cluster of the same name made, which the garbage collector
/// has yet to delete. `None` for objects this one controls and for objects no `kind` controls.
pub fn earlier_controller(meta: &ObjectMeta, kind: &str, uid: &str) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .filter(|o| o.uid != uid)
        .map(|o| o.uid.clone())
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
    fn an_object_an_earlier_cluster_of_the_name_controls_is_told_apart() {
        let controlled = |kind: &str, uid: &str| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                kind: kind.into(),
                uid: uid.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            earlier_controller(&controlled("Cluster", "old"), "Cluster", "new"),
            Some("old".into())
        );
        assert_eq!(
            earlier_controller(&controlled("Cluster", "new"), "Cluster", "new"),
            None
        );
        // Another kind's controller, or none at all (a Secret a user made): not an earlier life.
        assert_eq!(
            earlier_controller(&controlled("Restore", "old"), "Cluster", "new"),
            None
        );
        assert_eq!(
            earlier_controller(&ObjectMeta::default(), "Cluster", "new"),
            None
        );
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
