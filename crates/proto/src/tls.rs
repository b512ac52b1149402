//! Optional TLS 1.3 around TCP connections, for clusters whose hosts talk across a network
//! others share (`eckpt up --tls`).
//!
//! The HMAC handshake ([`crate::ClusterSecret`]) authenticates both peers but leaves the
//! frames after it in the clear, and an active man-in-the-middle who relays a handshake can
//! then read and alter them. With TLS, every TCP connection is first a TLS 1.3 session to a
//! server holding the cluster's key; the HMAC handshake then runs inside it.
//!
//! The cluster's identity is one self-signed certificate and its key, made when the cluster
//! is created and kept beside the secret (`D/tls.pem`, owner-only, crash-safely created like
//! the secret). There is no certificate authority to trust: a client accepts exactly that
//! certificate (pinned), whatever name or dates it carries, and every listener presents it.
//! Whoever holds the secret file holds the key too, so TLS adds confidentiality and
//! integrity on the wire, not another principal. Unix sockets (one host) stay in the clear.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::auth::{create_private_file, read_private_file};
use crate::error::ProtoError;

/// The name in the cluster certificate and the one clients ask for (never checked against
/// DNS: the certificate itself is what a client accepts).
const CLUSTER_NAME: &str = "eckpt-cluster";

/// Where the TLS identity of the cluster in `cluster_dir` is kept, if it has one.
pub fn tls_path(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("tls.pem")
}

/// The cluster's TLS identity, ready to wrap connections either way.
pub struct ClusterTls {
    certificate: CertificateDer<'static>,
    client: tokio_rustls::TlsConnector,
    server: tokio_rustls::TlsAcceptor,
}

impl PartialEq for ClusterTls {
    fn eq(&self, other: &ClusterTls) -> bool {
        self.certificate == other.certificate
    }
}

impl Eq for ClusterTls {}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterTls(<key redacted>)")
    }
}

impl ClusterTls {
    /// Makes a new identity and creates `path` with it (owner-only; an existing file is
    /// never replaced).
    pub fn create_file(path: &Path) -> Result<ClusterTls, ProtoError> {
        let made = rcgen::generate_simple_self_signed(vec![CLUSTER_NAME.to_string()])
            .map_err(|e| invalid(path, format!("making a certificate: {e}")))?;
        let pem = format!("{}{}", made.cert.pem(), made.signing_key.serialize_pem());
        create_private_file(path, pem.as_bytes())?;
        ClusterTls::from_pem(path, pem.as_bytes())
    }

    /// Loads the identity at `path`, refusing a file group or others could read.
    pub fn load(path: &Path) -> Result<ClusterTls, ProtoError> {
        ClusterTls::from_pem(path, &read_private_file(path)?)
    }

    fn from_pem(path: &Path, pem: &[u8]) -> Result<ClusterTls, ProtoError> {
        let certificate =
            CertificateDer::from_pem_slice(pem).map_err(|e| invalid(path, format!("no certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| invalid(path, format!("no key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| invalid(path, e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![certificate.clone()], key)
            .map_err(|e| invalid(path, format!("the key does not fit the certificate: {e}")))?;
        let pinned = PinnedCertificate {
            certificate: certificate.clone(),
            provider: provider.clone(),
        };
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| invalid(path, e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(pinned))
            .with_no_client_auth();
        Ok(ClusterTls {
            certificate,
            client: tokio_rustls::TlsConnector::from(Arc::new(client)),
            server: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        })
    }

    /// The client side of a TLS session over `stream` (bounded by the caller).
    pub(crate) async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<S>> {
        let name = ServerName::try_from(CLUSTER_NAME).expect("a valid DNS name");
        self.client.connect(name, stream).await
    }

    /// The server side of a TLS session over `stream` (bounded by the caller).
    pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<S>> {
        self.server.accept(stream).await
    }
}

fn invalid(path: &Path, reason: String) -> ProtoError {
    ProtoError::SecretInvalid {
        path: path.to_path_buf(),
        reason,
    }
}

/// Accepts the cluster's certificate and nothing else.
#[derive(Debug)]
struct PinnedCertificate {
    certificate: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.certificate.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
