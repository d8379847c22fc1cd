//! The self-signed certificate made at start, and its PVE-style fingerprint.

use std::sync::Arc;

use sha2::{Digest, Sha256};

pub struct Cert {
    pub cert_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
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
