//! Backup repos: how Jobs reach them ([`access`]), whether an object store answers ([`probe`]),
//! what a repo leaves in the namespaces that use it ([`copies`]), and the BackupRepo controller
//! ([`controller`]).

pub mod access;
pub mod controller;
pub mod copies;
pub mod probe;
