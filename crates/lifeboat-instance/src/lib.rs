//! Lifeboat's instance manager: the first process of every data and sentinel pod.
//!
//! A data pod decides its role from what the pods hold ([`decide`]), starts and supervises
//! `redis-server` (from its RDB where the AOF would lose data or identity, [`boot`]), records its dataset's replication history on its volume ([`state`]), answers the
//! kubelet's probes and its peers' questions over HTTP ([`http`]), and hands the primary role over
//! before a planned stop ([`switchover`]). A sentinel pod keeps its sentinel's file across restarts
//! ([`sentinel`]).

pub mod boot;
pub mod client;
pub mod conf;
pub mod data;
pub mod decide;
pub mod error;
pub mod http;
pub mod lineage;
pub mod peers;
pub mod report;
pub mod sentinel;
pub mod settings;
pub mod state;
pub mod switchover;
