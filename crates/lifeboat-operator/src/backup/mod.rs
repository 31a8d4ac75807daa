//! Backups: the BackupPolicy Lifeboat creates per data component ([`policy`]) and the Backup
//! controller that runs `lifeboat-mover backup` in a Job ([`controller`]), the check that holds a
//! Backup while its Cluster is being restored ([`gate`]), the removal of a deleted Backup's
//! data ([`deletion`]), the deletion of expired Backups ([`retention`]), and restore drills that
//! prove a Backup restorable ([`drill`]).

pub mod controller;
pub mod deletion;
pub mod drill;
pub mod gate;
mod job;
pub mod policy;
pub mod retention;
