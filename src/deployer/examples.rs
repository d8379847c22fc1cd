//! The example rollouts, compiled in so `provision-harness rehearse` runs from anywhere.
//! Generated from `examples/sankofa/` and `examples/sankofa-fixed/` (keep in sync when adding files;
//! a unit test checks that every file on disk is listed).

/// `(path relative to the rollout directory, text)` of every manifest in `examples/sankofa/production`.
pub const SANKOFA_MANIFESTS: &[(&str, &str)] = &[
    (
        "production/basic-vm.yaml",
        include_str!("../../examples/sankofa/production/basic-vm.yaml"),
    ),
    (
        "production/cloudflare-tunnel-vm.yaml",
        include_str!("../../examples/sankofa/production/cloudflare-tunnel-vm.yaml"),
    ),
    (
        "production/large-vm.yaml",
        include_str!("../../examples/sankofa/production/large-vm.yaml"),
    ),
    (
        "production/medium-vm.yaml",
        include_str!("../../examples/sankofa/production/medium-vm.yaml"),
    ),
    (
        "production/nginx-proxy-vm.yaml",
        include_str!("../../examples/sankofa/production/nginx-proxy-vm.yaml"),
    ),
    (
        "production/phoenix/as4-gateway.yaml",
        include_str!("../../examples/sankofa/production/phoenix/as4-gateway.yaml"),
    ),
    (
        "production/phoenix/business-integration-gateway.yaml",
        include_str!("../../examples/sankofa/production/phoenix/business-integration-gateway.yaml"),
    ),
    (
        "production/phoenix/codespaces-ide.yaml",
        include_str!("../../examples/sankofa/production/phoenix/codespaces-ide.yaml"),
    ),
    (
        "production/phoenix/devops-runner.yaml",
        include_str!("../../examples/sankofa/production/phoenix/devops-runner.yaml"),
    ),
    (
        "production/phoenix/dns-primary.yaml",
        include_str!("../../examples/sankofa/production/phoenix/dns-primary.yaml"),
    ),
    (
        "production/phoenix/email-server.yaml",
        include_str!("../../examples/sankofa/production/phoenix/email-server.yaml"),
    ),
    (
        "production/phoenix/financial-messaging-gateway.yaml",
        include_str!("../../examples/sankofa/production/phoenix/financial-messaging-gateway.yaml"),
    ),
    (
        "production/phoenix/git-server.yaml",
        include_str!("../../examples/sankofa/production/phoenix/git-server.yaml"),
    ),
    (
        "production/smom-dbis-138/blockscout.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/blockscout.yaml"),
    ),
    (
        "production/smom-dbis-138/management.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/management.yaml"),
    ),
    (
        "production/smom-dbis-138/monitoring.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/monitoring.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-01.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/rpc-node-01.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-02.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/rpc-node-02.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-03.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/rpc-node-03.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-04.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/rpc-node-04.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-01.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/sentry-01.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-02.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/sentry-02.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-03.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/sentry-03.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-04.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/sentry-04.yaml"),
    ),
    (
        "production/smom-dbis-138/services.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/services.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-01.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/validator-01.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-02.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/validator-02.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-03.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/validator-03.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-04.yaml",
        include_str!("../../examples/sankofa/production/smom-dbis-138/validator-04.yaml"),
    ),
    (
        "production/vm-100.yaml",
        include_str!("../../examples/sankofa/production/vm-100.yaml"),
    ),
];
pub const SANKOFA_PROVIDER_CONFIG: &str =
    include_str!("../../examples/sankofa/provider-config.yaml");
pub const SANKOFA_CREDENTIALS: &str =
    include_str!("../../examples/sankofa/proxmox-credentials.yaml");

/// `(path relative to the rollout directory, text)` of every manifest in `examples/sankofa-fixed/production`.
pub const SANKOFA_FIXED_MANIFESTS: &[(&str, &str)] = &[
    (
        "production/basic-vm.yaml",
        include_str!("../../examples/sankofa-fixed/production/basic-vm.yaml"),
    ),
    (
        "production/cloudflare-tunnel-vm.yaml",
        include_str!("../../examples/sankofa-fixed/production/cloudflare-tunnel-vm.yaml"),
    ),
    (
        "production/large-vm.yaml",
        include_str!("../../examples/sankofa-fixed/production/large-vm.yaml"),
    ),
    (
        "production/medium-vm.yaml",
        include_str!("../../examples/sankofa-fixed/production/medium-vm.yaml"),
    ),
    (
        "production/nginx-proxy-vm.yaml",
        include_str!("../../examples/sankofa-fixed/production/nginx-proxy-vm.yaml"),
    ),
    (
        "production/phoenix/as4-gateway.yaml",
        include_str!("../../examples/sankofa-fixed/production/phoenix/as4-gateway.yaml"),
    ),
    (
        "production/phoenix/business-integration-gateway.yaml",
        include_str!(
            "../../examples/sankofa-fixed/production/phoenix/business-integration-gateway.yaml"
        ),
    ),
    (
        "production/phoenix/codespaces-ide.yaml",
        include_str!("../../examples/sankofa-fixed/production/phoenix/codespaces-ide.yaml"),
    ),
    (
        "production/phoenix/devops-runner.yaml",
        include_str!("../../examples/sankofa-fixed/production/phoenix/devops-runner.yaml"),
    ),
    (
        "production/phoenix/dns-primary.yaml",
        include_str!("../../examples/sankofa-fixed/production/phoenix/dns-primary.yaml"),
    ),
    (
        "production/phoenix/email-server.yaml",
        include_str!("../../examples/sankofa-fixed/production/phoenix/email-server.yaml"),
    ),
    (
        "production/phoenix/financial-messaging-gateway.yaml",
        include_str!(
            "../../examples/sankofa-fixed/production/phoenix/financial-messaging-gateway.yaml"
        ),
    ),
    (
        "production/phoenix/git-server.yaml",
        include_str!("../../examples/sankofa-fixed/production/phoenix/git-server.yaml"),
    ),
    (
        "production/smom-dbis-138/blockscout.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/blockscout.yaml"),
    ),
    (
        "production/smom-dbis-138/management.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/management.yaml"),
    ),
    (
        "production/smom-dbis-138/monitoring.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/monitoring.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-01.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/rpc-node-01.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-02.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/rpc-node-02.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-03.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/rpc-node-03.yaml"),
    ),
    (
        "production/smom-dbis-138/rpc-node-04.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/rpc-node-04.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-01.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/sentry-01.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-02.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/sentry-02.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-03.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/sentry-03.yaml"),
    ),
    (
        "production/smom-dbis-138/sentry-04.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/sentry-04.yaml"),
    ),
    (
        "production/smom-dbis-138/services.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/services.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-01.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/validator-01.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-02.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/validator-02.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-03.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/validator-03.yaml"),
    ),
    (
        "production/smom-dbis-138/validator-04.yaml",
        include_str!("../../examples/sankofa-fixed/production/smom-dbis-138/validator-04.yaml"),
    ),
    (
        "production/vm-100.yaml",
        include_str!("../../examples/sankofa-fixed/production/vm-100.yaml"),
    ),
];
pub const SANKOFA_FIXED_PROVIDER_CONFIG: &str =
    include_str!("../../examples/sankofa-fixed/provider-config.yaml");
pub const SANKOFA_FIXED_CREDENTIALS: &str =
    include_str!("../../examples/sankofa-fixed/proxmox-credentials.yaml");

/// The fake-proxmox scenario with the storage problems fixed (RBD storage, `import` image).
pub const SANKOFA_FIXED_SCENARIO: &str = include_str!("../../examples/sankofa-fixed/scenario.yaml");

/// Seed 002's three PhotonCloud nodes as ProxmoxVM manifests for a lab-backed site
/// (`examples/photoncloud-t036/rollout`): `rehearse --backend lab` boots them as real guests.
pub const PHOTONCLOUD_MANIFESTS: &[(&str, &str)] = &[
    (
        "production/node01.yaml",
        include_str!("../../examples/photoncloud-t036/rollout/production/node01.yaml"),
    ),
    (
        "production/node02.yaml",
        include_str!("../../examples/photoncloud-t036/rollout/production/node02.yaml"),
    ),
    (
        "production/node03.yaml",
        include_str!("../../examples/photoncloud-t036/rollout/production/node03.yaml"),
    ),
];
pub const PHOTONCLOUD_PROVIDER_CONFIG: &str =
    include_str!("../../examples/photoncloud-t036/rollout/provider-config.yaml");
pub const PHOTONCLOUD_CREDENTIALS: &str =
    include_str!("../../examples/photoncloud-t036/rollout/proxmox-credentials.yaml");
/// The lab-backed site (`backend: lab`) the PhotonCloud nodes are made on.
pub const PHOTONCLOUD_SCENARIO: &str =
    include_str!("../../examples/photoncloud-t036/rollout/scenario.yaml");
/// The volume of [`PHOTONCLOUD_SCENARIO`] whose data is the project's cloud image.
pub const PHOTONCLOUD_IMAGE_VOLUME: (&str, &str) =
    ("local", "import/provision-harness-cloud.qcow2");

#[cfg(test)]
mod tests {
    use super::*;

    fn on_disk(dir: &str) -> Vec<String> {
        fn walk(base: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).expect("examples dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    walk(base, &p, out);
                } else if p.extension().is_some_and(|x| x == "yaml") {
                    out.push(
                        p.strip_prefix(base)
                            .expect("prefix")
                            .to_string_lossy()
                            .into_owned(),
                    );
                }
            }
        }
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut out = Vec::new();
        walk(&base, &base.join("production"), &mut out);
        out.sort();
        out
    }

    #[test]
    fn every_example_file_is_embedded() {
        let listed = |m: &[(&str, &str)]| m.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>();
        assert_eq!(listed(SANKOFA_MANIFESTS), on_disk("examples/sankofa"));
        assert_eq!(
            listed(SANKOFA_FIXED_MANIFESTS),
            on_disk("examples/sankofa-fixed")
        );
        assert_eq!(
            listed(PHOTONCLOUD_MANIFESTS),
            on_disk("examples/photoncloud-t036/rollout")
        );
        assert_eq!(SANKOFA_MANIFESTS.len(), 30);
    }
}
