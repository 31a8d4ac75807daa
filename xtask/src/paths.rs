//! Where things live: the checkout, and the version-keyed cache outside it.

use std::path::PathBuf;

/// The workspace root (the parent of this crate's manifest directory).
///
/// `cargo run` sets `CARGO_MANIFEST_DIR` for the process, and that is preferred over the value
/// compiled in: the target directory is shared between checkouts (it lives in the cache), and
/// cargo may reuse a binary built in another checkout, whose compiled-in path no longer exists.
pub fn workspace_root() -> PathBuf {
    let here = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// Heavy builds and downloads are cached here, outside the checkout, keyed by version, so a warm
/// machine skips them. Overridable for machines where /var/cache is not writable.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("LIFEBOAT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/lifeboat"))
}
