//! Backups: the BackupPolicy Lifeboat creates per data component ([`policy`]) and the Backup
//! controller that runs `lifeboat-mover backup` in a Job ([`controller`]), the check that holds a
//! Backup while its Cluster is being restored ([`gate`]), and the removal of a deleted Backup's
//! data ([`deletion`]).

pub mod controller;
pub mod deletion;
pub mod gate;
pub mod policy;
