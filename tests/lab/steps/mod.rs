//! Step definitions, one file per domain concept.
pub mod clock;
pub mod cluster;
pub mod faults;
pub mod lab;
pub mod misconfig;
pub mod network;
