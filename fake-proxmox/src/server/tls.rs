//! The self-signed certificate made at start, and its PVE-style fingerprint.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// A listener's certificate and key.
pub struct Cert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The private key, PKCS#8 DER.
    pub key_der: Vec<u8>,
    /// See [`fingerprint`].
    pub fingerprint: String,
}

/// SHA-256 of the DER, uppercase hex pairs joined by `:` (as PVE shows it).
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A new self-signed certificate for `localhost`, `127.0.0.1`, `::1` and `names`; fails only if
/// the key cannot be made.
pub fn make_cert(names: &[String]) -> Result<Cert, crate::Error> {
    let mut sans: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    sans.extend(names.iter().cloned());
    let ck =
        rcgen::generate_simple_self_signed(sans).map_err(|e| crate::Error::Tls(e.to_string()))?;
    let cert_der = ck.cert.der().to_vec();
    Ok(Cert {
        cert_pem: ck.cert.pem(),
        fingerprint: fingerprint(&cert_der),
        key_der: ck.signing_key.serialize_der(),
        cert_der,
    })
}

/// The rustls configuration that serves `cert` (aws-lc-rs, ALPN `http/1.1` as PVE's
/// pveproxy); fails on a key rustls cannot use.
pub fn server_config(cert: &Cert) -> Result<Arc<rustls::ServerConfig>, crate::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_der.clone())
        .map_err(|e| crate::Error::Tls(e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| crate::Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(
                cert.cert_der.clone(),
            )],
            key,
        )
        .map_err(|e| crate::Error::Tls(e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The certificate of a state dir (`cert.pem`, `key.pem`), made and written there on first
/// use, so clients that pinned its fingerprint keep trusting a restarted server.
pub fn kept_cert(dir: &std::path::Path, names: &[String]) -> Result<Cert, crate::Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |f: &str| std::fs::read(dir.join(f));
    match (read("cert.pem"), read("key.pem")) {
        (Ok(cert_pem), Ok(key_pem)) => {
            let bad = |f: &str, e: String| {
                crate::Error::StateDir(format!("{}: {e}", dir.join(f).display()))
            };
            let cert = CertificateDer::from_pem_slice(&cert_pem)
                .map_err(|e| bad("cert.pem", e.to_string()))?;
            let key = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| bad("key.pem", e.to_string()))?;
            let cert_der = cert.to_vec();
            Ok(Cert {
                cert_pem: String::from_utf8_lossy(&cert_pem).into_owned(),
                fingerprint: fingerprint(&cert_der),
                key_der: key.secret_der().to_vec(),
                cert_der,
            })
        }
        _ => {
            let cert = make_cert(names)?;
            let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.key_der.clone());
            let key_pem = pem_of("PRIVATE KEY", key.secret_pkcs8_der());
            // The key first: a cert.pem without its key would be made again.
            crate::persist::write_atomic(dir, "key.pem", key_pem.as_bytes())?;
            crate::persist::write_atomic(dir, "cert.pem", cert.cert_pem.as_bytes())?;
            Ok(cert)
        }
    }
}

/// PEM armour around DER.
fn pem_of(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}
