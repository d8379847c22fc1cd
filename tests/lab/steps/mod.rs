//! Step definitions, one file per domain concept.
pub mod cluster;
pub mod faults;
pub mod lab;
pub mod misconfig;
