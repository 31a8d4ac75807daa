//! Scheduled backups: `BackupSchedule` objects, and the one Lifeboat keeps for a Cluster's
//! `spec.backup`. [`cron`] reads the expressions, [`plan`] decides what each schedule does now
//! (pure), [`controller`] creates the Backups and reports, [`for_cluster`] builds a Cluster's
//! schedule.

pub mod controller;
pub mod cron;
pub mod for_cluster;
pub mod plan;
