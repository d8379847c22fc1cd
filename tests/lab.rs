//! Runner for the `@lab` Gherkin features (seed 002's cluster bring-up on vm-lab).
fn main() {}
