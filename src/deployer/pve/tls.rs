//! TLS trust for a PVE endpoint: the system roots by default, a given CA, a pinned SHA-256
//! certificate fingerprint (how PVE shows it: `AB:CD:…`), or — only when asked — no verification.

use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};

#[derive(Clone, Default, PartialEq)]
pub enum TlsMode {
    /// Verify against the system's roots.
    #[default]
    Verify,
    /// Verify against this CA (PEM) only.
    CaPem(String),
    /// Accept exactly the certificate with this SHA-256 fingerprint (hostname not checked: PVE's
    /// self-signed certificates name the node, not the address used to reach it).
    Pinned([u8; 32]),
    /// Accept any certificate. Only with `insecure: true` in the provider config.
    Insecure,
}

impl std::fmt::Debug for TlsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsMode::Verify => f.write_str("Verify"),
            TlsMode::CaPem(_) => f.write_str("CaPem(..)"),
            TlsMode::Pinned(fp) => write!(f, "Pinned({})", format_fingerprint(fp)),
            TlsMode::Insecure => f.write_str("Insecure"),
        }
    }
}

/// Parses `AB:CD:…` (any case) or 64 bare hex digits.
pub fn parse_fingerprint(s: &str) -> Result<[u8; 32], String> {
    let hex_digits: String = s.chars().filter(|c| *c != ':').collect();
    let bytes =
        hex::decode(hex_digits.trim()).map_err(|e| format!("fingerprint '{s}' is not hex: {e}"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("fingerprint has {} bytes, SHA-256 needs 32", b.len()))
}

pub fn format_fingerprint(fp: &[u8; 32]) -> String {
    fp.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn fingerprint_of(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

#[derive(Debug)]
struct PinnedVerifier {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = fingerprint_of(end_entity.as_ref());
        if got == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "certificate fingerprint {} does not match the pinned {}",
                format_fingerprint(&got),
                format_fingerprint(&self.pin)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Applies the mode to a reqwest builder.
pub fn apply(
    builder: reqwest::ClientBuilder,
    mode: &TlsMode,
) -> Result<reqwest::ClientBuilder, String> {
    match mode {
        TlsMode::Verify => Ok(builder),
        TlsMode::Insecure => Ok(builder.tls_danger_accept_invalid_certs(true)),
        TlsMode::CaPem(pem) => {
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| format!("CA certificate: {e}"))?;
            Ok(builder.tls_certs_only(certs))
        }
        TlsMode::Pinned(pin) => {
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let algorithms = provider.signature_verification_algorithms;
            let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS setup: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedVerifier {
                    pin: *pin,
                    algorithms,
                }))
                .with_no_client_auth();
            Ok(builder.tls_backend_preconfigured(config))
        }
    }
}

/// The provider is a process-wide default rustls needs when several could be linked in.
pub fn ensure_crypto_provider() {
    let _ = CryptoProvider::install_default(rustls::crypto::aws_lc_rs::default_provider());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_round_trip() {
        let fp = fingerprint_of(b"cert");
        let s = format_fingerprint(&fp);
        assert_eq!(s.len(), 32 * 3 - 1);
        assert_eq!(parse_fingerprint(&s), Ok(fp));
        assert_eq!(
            parse_fingerprint(&s.to_lowercase().replace(':', "")),
            Ok(fp)
        );
        assert!(parse_fingerprint("AB:CD").is_err());
        assert!(parse_fingerprint("zz").is_err());
    }

    #[test]
    fn debug_does_not_print_ca() {
        assert_eq!(
            format!("{:?}", TlsMode::CaPem("secret".into())),
            "CaPem(..)"
        );
    }
}
