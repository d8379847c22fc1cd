//! `cargo test --test rollout [-- --tags @auth | --name REGEX]`: the rollout features.
//! See README, section "features".

#[path = "rollout/mod.rs"]
mod rollout;

#[tokio::main]
async fn main() {
    rollout::run_all().await;
}
