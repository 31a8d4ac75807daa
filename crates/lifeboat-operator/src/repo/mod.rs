//! Backup repos: how Jobs reach them ([`access`]), whether an object store answers ([`probe`]),
//! and the BackupRepo controller ([`controller`]).

pub mod access;
pub mod controller;
pub mod probe;
