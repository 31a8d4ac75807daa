//! Backups: the BackupPolicy Lifeboat creates per data component ([`policy`]) and the Backup
//! controller that runs `lifeboat-mover backup` in a Job ([`controller`]).

pub mod controller;
pub mod policy;
