//! Backup repos: how Jobs reach them ([`access`]), whether an object store answers ([`probe`]),
//! which namespaces a repo serves and where it left copies ([`namespaces`]), what a repo leaves
//! in the namespaces that use it ([`copies`]), and the BackupRepo controller ([`controller`]).

pub mod access;
pub mod controller;
pub mod copies;
pub mod namespaces;
pub mod probe;
