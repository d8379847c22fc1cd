//! Running the Gherkin suites on more than one machine: which scenarios a shard runs
//! ([`shard`]), how long each took last time ([`durations`]), and one report from many shards'
//! reports ([`merge`]).
//!
//! The cucumber runners (`tests/rollout.rs`, `tests/lab.rs`) feed [`shard::assign`] the
//! scenarios they would run, in run order, and keep those of their shard; every run writes a
//! durations file from its cucumber JSON report; `provision-harness report merge` joins the
//! shards' JUnit, cucumber JSON and durations files and renders one HTML summary.
//! Nothing here knows cucumber's types: scenarios are keys and tags, reports are files.

pub mod durations;
pub mod merge;
pub mod shard;
