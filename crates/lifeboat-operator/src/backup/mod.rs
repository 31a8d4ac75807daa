//! Backups: the BackupPolicy Lifeboat creates per data component ([`policy`]) and the Backup
//! controller that runs `lifeboat-mover backup` in a Job ([`controller`]), the check that holds a
//! Backup while its Cluster is being restored ([`gate`]), the removal of a deleted Backup's
//! data ([`deletion`]), and the deletion of expired Backups ([`retention`]).

pub mod controller;
pub mod deletion;
pub mod gate;
pub mod policy;
pub mod retention;
