//! Rehearse benchmark (being written by the deployer helper).
fn main() {}
