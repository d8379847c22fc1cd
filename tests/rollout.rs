//! `cargo test --test rollout [-- --tags @auth | --name REGEX]`: the rollout features.
//! See the book: docs/src/features.md.

#[path = "rollout/mod.rs"]
mod rollout;

#[tokio::main]
async fn main() {
    rollout::run_all().await;
}
