//! S3: a cluster CA and one certificate per node, written under the names and modes the cluster
//! config expects, and checked before anything is installed.
//!
//! The seed lost a first boot to certificates named `ca-cert.pem`/`cert.pem`/`key.pem` while
//! `cluster-config.json` pointed at `ca.crt`/`node0X.crt`/`node0X.key`; [`verify_node_secrets`]
//! turns that into an error naming the file that is missing and the files that are there.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData as _, SanType,
};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::error::ClusterError;
use super::topology::{ClusterSpec, NodeIdentity};

/// Mode of certificates (CA and node): world-readable.
pub const CERT_MODE: u32 = 0o644;
/// Mode of private keys: owner read only.
pub const KEY_MODE: u32 = 0o400;

/// The CA and every node's certificate and key, as PEM.
#[derive(Debug, Clone)]
pub struct ClusterTls {
    pub ca_cert_pem: String,
    pub nodes: Vec<NodeCert>,
}

#[derive(Debug, Clone)]
pub struct NodeCert {
    pub node: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// The three file names of one node's secrets directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFileNames {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl TlsFileNames {
    /// The names `cluster-config.json` uses: `ca.crt`, `<node>.crt`, `<node>.key`.
    pub fn for_node(node: &str) -> Self {
        Self {
            ca: "ca.crt".into(),
            cert: format!("{node}.crt"),
            key: format!("{node}.key"),
        }
    }

    /// The names the seed's certificate step first produced (before its "critical fix").
    pub fn seed_original() -> Self {
        Self {
            ca: "ca-cert.pem".into(),
            cert: "cert.pem".into(),
            key: "key.pem".into(),
        }
    }
}

/// Generates a CA for the cluster and signs one certificate per node whose SANs hold the
/// node's hostname and address (plus `localhost`/`127.0.0.1`, so tools on the node itself can
/// talk to the local member). Node certificates carry both server and client usage: etcd uses
/// the same pair for peer mTLS in both directions and for `etcdctl`.
pub fn generate(spec: &ClusterSpec) -> Result<ClusterTls, ClusterError> {
    spec.check()?;
    let now = OffsetDateTime::now_utc();
    // A day of slack either side: guest clocks under TCG start from the host RTC but drift.
    let not_before = now - Duration::days(1);
    let not_after = now + Duration::days(365);

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{} cluster CA", spec.name));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca_key = KeyPair::generate().map_err(tls_err)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(tls_err)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut nodes = Vec::with_capacity(spec.nodes.len());
    for n in &spec.nodes {
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
        p.subject_alt_names = vec![
            SanType::DnsName(n.hostname.clone().try_into().map_err(tls_err)?),
            SanType::IpAddress(n.address),
            SanType::DnsName("localhost".to_owned().try_into().map_err(tls_err)?),
            SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])),
        ];
        p.distinguished_name
            .push(DnType::CommonName, n.hostname.clone());
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        p.use_authority_key_identifier_extension = true;
        p.not_before = not_before;
        p.not_after = not_after;
        let key = KeyPair::generate().map_err(tls_err)?;
        let cert = p.signed_by(&key, &issuer).map_err(tls_err)?;
        nodes.push(NodeCert {
            node: n.name.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        });
    }
    Ok(ClusterTls {
        ca_cert_pem: ca_cert.pem(),
        nodes,
    })
}

fn tls_err(e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Tls(e.to_string())
}

impl ClusterTls {
    pub fn node(&self, name: &str) -> Result<&NodeCert, ClusterError> {
        self.nodes
            .iter()
            .find(|c| c.node == name)
            .ok_or_else(|| ClusterError::Tls(format!("no certificate was generated for {name}")))
    }

    /// Writes one node's CA certificate, certificate and key into `dir` under `names`, with
    /// [`CERT_MODE`] and [`KEY_MODE`]. Existing files are replaced.
    pub fn write_node_secrets(
        &self,
        node: &str,
        dir: &Path,
        names: &TlsFileNames,
    ) -> Result<(), ClusterError> {
        let nc = self.node(node)?;
        fs::create_dir_all(dir).map_err(|e| ClusterError::io(dir, e))?;
        write_with_mode(&dir.join(&names.ca), &self.ca_cert_pem, CERT_MODE)?;
        write_with_mode(&dir.join(&names.cert), &nc.cert_pem, CERT_MODE)?;
        write_with_mode(&dir.join(&names.key), &nc.key_pem, KEY_MODE)?;
        Ok(())
    }
}

/// Writes `body` to `path` and leaves it with exactly `mode` (a 0400 file that already exists
/// is removed first, since it cannot be opened for writing).
pub fn write_with_mode(path: &Path, body: &str, mode: u32) -> Result<(), ClusterError> {
    if path.exists() {
        fs::remove_file(path).map_err(|e| ClusterError::io(path, e))?;
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ClusterError::io(path, e))?;
    f.write_all(body.as_bytes())
        .map_err(|e| ClusterError::io(path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| ClusterError::io(path, e))
}

/// Checks a node's secrets directory before it is used: the three files the config names exist
/// under exactly those names with the expected modes, the CA is a CA, the node certificate is
/// signed by it, is valid now, names the node's hostname and address, and matches the key.
pub fn verify_node_secrets(
    dir: &Path,
    node: &NodeIdentity,
    names: &TlsFileNames,
) -> Result<(), ClusterError> {
    let fail = |cause: String| ClusterError::TlsFiles {
        node: node.name.clone(),
        cause,
    };
    check_modes(dir, names).map_err(fail)?;
    let ca_pem = read(dir, &names.ca, &fail)?;
    let cert_pem = read(dir, &names.cert, &fail)?;
    let key_pem = read(dir, &names.key, &fail)?;
    let ca_der = pem_der(&ca_pem, "CERTIFICATE").map_err(|e| fail(format!("{}: {e}", names.ca)))?;
    let cert_der =
        pem_der(&cert_pem, "CERTIFICATE").map_err(|e| fail(format!("{}: {e}", names.cert)))?;
    let (_, ca) = X509Certificate::from_der(&ca_der)
        .map_err(|e| fail(format!("{}: not an X.509 certificate: {e}", names.ca)))?;
    let (_, cert) = X509Certificate::from_der(&cert_der)
        .map_err(|e| fail(format!("{}: not an X.509 certificate: {e}", names.cert)))?;
    check_chain(&ca, &cert, names).map_err(fail)?;
    check_sans(&cert, node, names).map_err(fail)?;
    check_key(&key_pem, &cert, names).map_err(fail)
}

/// The three files exist with their modes (certificates 0644, the key 0600).
fn check_modes(dir: &Path, names: &TlsFileNames) -> Result<(), String> {
    for (name, mode) in [
        (&names.ca, CERT_MODE),
        (&names.cert, CERT_MODE),
        (&names.key, KEY_MODE),
    ] {
        let path = dir.join(name);
        let Ok(meta) = fs::metadata(&path) else {
            return Err(format!(
                "{} does not exist (the config names it; {} holds: {})",
                path.display(),
                dir.display(),
                list_dir(dir)
            ));
        };
        let actual = meta.permissions().mode() & 0o777;
        if actual != mode {
            return Err(format!(
                "{} has mode {actual:04o}, expected {mode:04o}",
                path.display()
            ));
        }
    }
    Ok(())
}

/// The CA is a CA, it signed the node's certificate, and that is valid now.
fn check_chain(
    ca: &X509Certificate<'_>,
    cert: &X509Certificate<'_>,
    names: &TlsFileNames,
) -> Result<(), String> {
    if !ca.is_ca() {
        return Err(format!("{} is not a CA certificate", names.ca));
    }
    cert.verify_signature(Some(ca.public_key()))
        .map_err(|_| format!("{} is not signed by the CA in {}", names.cert, names.ca))?;
    if !cert.validity().is_valid() {
        return Err(format!(
            "{} is not valid now (valid {} to {})",
            names.cert,
            cert.validity().not_before,
            cert.validity().not_after
        ));
    }
    Ok(())
}

/// The certificate names the node's hostname and address (peers dial either).
fn check_sans(
    cert: &X509Certificate<'_>,
    node: &NodeIdentity,
    names: &TlsFileNames,
) -> Result<(), String> {
    let sans: Vec<GeneralName<'_>> = cert
        .subject_alternative_name()
        .map_err(|e| format!("{}: bad SAN extension: {e}", names.cert))?
        .map(|ext| ext.value.general_names.clone())
        .unwrap_or_default();
    let has_dns = sans
        .iter()
        .any(|g| matches!(g, GeneralName::DNSName(d) if d.eq_ignore_ascii_case(&node.hostname)));
    if !has_dns {
        return Err(format!(
            "{} has no SAN for hostname {}",
            names.cert, node.hostname
        ));
    }
    let addr_bytes: Vec<u8> = match node.address {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    };
    let has_ip = sans
        .iter()
        .any(|g| matches!(g, GeneralName::IPAddress(b) if *b == addr_bytes.as_slice()));
    if !has_ip {
        return Err(format!(
            "{} has no SAN for address {}",
            names.cert, node.address
        ));
    }
    Ok(())
}

/// The private key is the certificate's.
fn check_key(
    key_pem: &str,
    cert: &X509Certificate<'_>,
    names: &TlsFileNames,
) -> Result<(), String> {
    let key =
        KeyPair::from_pem(key_pem).map_err(|e| format!("{}: not a private key: {e}", names.key))?;
    if key.der_bytes() != cert.public_key().subject_public_key.data.as_ref() {
        return Err(format!(
            "{} does not belong to the certificate {}",
            names.key, names.cert
        ));
    }
    Ok(())
}

fn read(
    dir: &Path,
    name: &str,
    fail: &impl Fn(String) -> ClusterError,
) -> Result<String, ClusterError> {
    let p = dir.join(name);
    fs::read_to_string(&p).map_err(|e| fail(format!("{}: {e}", p.display())))
}

fn pem_der(pem: &str, label: &str) -> Result<Vec<u8>, String> {
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| format!("not PEM: {e}"))?;
    if block.label != label {
        return Err(format!(
            "PEM block is {:?}, expected {label:?}",
            block.label
        ));
    }
    Ok(block.contents)
}

fn list_dir(dir: &Path) -> String {
    match fs::read_dir(dir) {
        Ok(rd) => {
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            if names.is_empty() {
                "nothing".into()
            } else {
                names.join(", ")
            }
        }
        Err(_) => "nothing (the directory does not exist)".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn setup() -> (tempfile::TempDir, ClusterSpec, ClusterTls) {
        let spec = ClusterSpec::seed_t036();
        let tls = generate(&spec).unwrap();
        (tempfile::tempdir().unwrap(), spec, tls)
    }

    #[test]
    fn files_named_and_moded_as_the_config_expects_verify() {
        let (dir, spec, tls) = setup();
        for n in &spec.nodes {
            let d = dir.path().join(&n.name);
            let names = TlsFileNames::for_node(&n.name);
            tls.write_node_secrets(&n.name, &d, &names).unwrap();
            verify_node_secrets(&d, n, &names).unwrap();
            let mode = |f: &str| fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode("ca.crt"), 0o644);
            assert_eq!(mode(&format!("{}.crt", n.name)), 0o644);
            assert_eq!(mode(&format!("{}.key", n.name)), 0o400);
        }
    }

    #[test]
    fn seed_original_names_fail_naming_the_missing_file_and_what_is_there() {
        let (dir, spec, tls) = setup();
        let n = &spec.nodes[0];
        tls.write_node_secrets(&n.name, dir.path(), &TlsFileNames::seed_original())
            .unwrap();
        let e = verify_node_secrets(dir.path(), n, &TlsFileNames::for_node(&n.name))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("node01: TLS files:"), "{e}");
        assert!(e.contains("ca.crt does not exist"), "{e}");
        assert!(e.contains("ca-cert.pem, cert.pem, key.pem"), "{e}");
    }

    #[test]
    fn world_readable_key_is_refused() {
        let (dir, spec, tls) = setup();
        let n = &spec.nodes[1];
        let names = TlsFileNames::for_node(&n.name);
        tls.write_node_secrets(&n.name, dir.path(), &names).unwrap();
        fs::set_permissions(
            dir.path().join("node02.key"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let e = verify_node_secrets(dir.path(), n, &names)
            .unwrap_err()
            .to_string();
        assert!(e.contains("node02.key has mode 0644, expected 0400"), "{e}");
    }

    #[test]
    fn certificate_of_another_node_is_refused_by_san() {
        let (dir, spec, tls) = setup();
        let names = TlsFileNames::for_node("node01");
        // node01's directory holding node02's certificate and key under node01's names
        write_with_mode(&dir.path().join("ca.crt"), &tls.ca_cert_pem, CERT_MODE).unwrap();
        let other = tls.node("node02").unwrap();
        write_with_mode(&dir.path().join("node01.crt"), &other.cert_pem, CERT_MODE).unwrap();
        write_with_mode(&dir.path().join("node01.key"), &other.key_pem, KEY_MODE).unwrap();
        let e = verify_node_secrets(dir.path(), &spec.nodes[0], &names)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no SAN for hostname node01"), "{e}");
    }

    #[test]
    fn certificate_from_another_ca_is_refused() {
        let (dir, spec, tls) = setup();
        let other = generate(&spec).unwrap();
        let names = TlsFileNames::for_node("node03");
        tls.write_node_secrets("node03", dir.path(), &names)
            .unwrap();
        write_with_mode(&dir.path().join("ca.crt"), &other.ca_cert_pem, CERT_MODE).unwrap();
        let e = verify_node_secrets(dir.path(), &spec.nodes[2], &names)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not signed by the CA"), "{e}");
    }

    #[test]
    fn key_of_another_node_is_refused() {
        let (dir, spec, tls) = setup();
        let names = TlsFileNames::for_node("node01");
        tls.write_node_secrets("node01", dir.path(), &names)
            .unwrap();
        write_with_mode(
            &dir.path().join("node01.key"),
            &tls.node("node02").unwrap().key_pem,
            KEY_MODE,
        )
        .unwrap();
        let e = verify_node_secrets(dir.path(), &spec.nodes[0], &names)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not belong to the certificate"), "{e}");
    }

    #[test]
    fn rewriting_over_a_read_only_key_works() {
        let (dir, _spec, tls) = setup();
        let names = TlsFileNames::for_node("node01");
        tls.write_node_secrets("node01", dir.path(), &names)
            .unwrap();
        tls.write_node_secrets("node01", dir.path(), &names)
            .unwrap();
    }
}
