//! Backup repos: how Jobs reach them ([`access`]) and the BackupRepo controller ([`controller`]).

pub mod access;
pub mod controller;
