//! `lifeboat-mover delete`: removes a backup from the repo, for Backups whose deletionPolicy is
//! `Delete`.

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::Serialize;

use crate::error::Result;
use crate::repo::{Repo, RepoArgs};

#[derive(clap::Args, Debug, Clone)]
pub struct DeleteArgs {
    /// The backup to delete.
    #[arg(long, env = "LIFEBOAT_BACKUP_NAME")]
    pub backup: String,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// What `delete` prints on stdout.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteSummary {
    pub backup_name: String,
    /// Objects removed, the manifest included.
    pub objects_deleted: usize,
    /// Whether the backup was already gone (deleting twice is a success: a retried Job must
    /// not fail).
    pub already_absent: bool,
}

/// Whether `location` lies below the directory `dir`, segment by segment: `a/x` is inside `a`;
/// `a-b/x` and `a` itself are not.
fn inside(location: &object_store::path::Path, dir: &object_store::path::Path) -> bool {
    location
        .prefix_match(dir)
        .is_some_and(|mut rest| rest.next().is_some())
}

pub async fn run(args: DeleteArgs) -> Result<DeleteSummary> {
    crate::manifest::validate_backup_name(&args.backup)?;
    let repo = Repo::open(&args.repo)?;
    let backup = args.backup.as_str();
    let what = |verb: &str| format!("{verb} backup \"{backup}\"");
    // The manifest goes first: from then on no restore can start from a backup whose objects
    // are about to vanish, and a delete cut short leaves only unreferenced objects.
    let mut deleted = 0;
    let already_absent = match repo.store.delete(&repo.manifest_path(backup)).await {
        Ok(()) => {
            deleted += 1;
            false
        }
        Err(object_store::Error::NotFound { .. }) => true,
        Err(e) => return Err(repo.error(&what("deleting the manifest of"), &e)),
    };
    let prefix = repo.backup_prefix(backup);
    let objects: Vec<_> = repo
        .store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| repo.error(&what("listing the objects of"), &e))?;
    // Only what lies inside the backup's own directory. The stores list by path segment, but the
    // guarantee that backup "a" never takes "a-b" with it is kept here, not left to a library.
    for o in objects.into_iter().filter(|o| inside(&o.location, &prefix)) {
        match repo.store.delete(&o.location).await {
            Ok(()) => deleted += 1,
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(repo.error(&what("deleting an object of"), &e)),
        }
    }
    Ok(DeleteSummary {
        backup_name: backup.to_owned(),
        objects_deleted: deleted,
        already_absent: already_absent && deleted == 0,
    })
}

#[cfg(test)]
mod tests {
    use super::inside;
    use object_store::path::Path;

    #[test]
    fn only_objects_below_the_backups_directory_are_its_own() {
        let dir = Path::from("e2e/ns/a-1234abcd");
        assert!(inside(&Path::from("e2e/ns/a-1234abcd/manifest.json"), &dir));
        assert!(inside(
            &Path::from("e2e/ns/a-1234abcd/objects/appendonlydir/x.aof.zst"),
            &dir
        ));
        for not in [
            "e2e/ns/a-1234abcd",
            "e2e/ns/a-1234abcd-b/manifest.json",
            "e2e/ns/a-1234abcdx/objects/dump.rdb.zst",
            "e2e/ns/a/manifest.json",
            "e2e/other/a-1234abcd/manifest.json",
        ] {
            assert!(!inside(&Path::from(not), &dir), "{not}");
        }
    }
}
