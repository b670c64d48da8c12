//! HTTPS: [`TlsTransport`], the [`Transport`] that runs a TLS handshake on each
//! accepted connection with a certificate chain and private key read from PEM
//! files. The handshake runs within the header timeout like the request head, so
//! a client that connects and never sends a ClientHello is closed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

use crate::server::Transport;

/// Why the TLS certificate or key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file is unreadable or holds no PEM certificate.
    #[error("tlsCert: cannot use {path} as a PEM certificate chain: {reason}")]
    Cert {
        /// The certificate file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The key file is unreadable or holds no PEM private key.
    #[error("tlsKey: cannot use {path} as a PEM private key: {reason}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The key does not suit the certificate, or rustls refused the pair.
    #[error("tlsKey: the key in {key} does not fit the certificate in {cert}: {source}")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The rustls error.
        source: rustls::Error,
    },
}

/// HTTPS over TCP: each accepted stream is wrapped in a TLS server session.
#[derive(Clone)]
pub struct TlsTransport {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl TlsTransport {
    /// A transport serving the certificate chain of the PEM file `cert` (leaf
    /// first) with the private key of the PEM file `key`.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<TlsTransport, TlsError> {
        let cert_error = |reason: String| TlsError::Cert { path: cert.to_owned(), reason };
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|err| cert_error(err.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| cert_error(err.to_string()))?;
        if chain.is_empty() {
            return Err(cert_error("it holds no CERTIFICATE block".to_owned()));
        }
        let private_key = PrivateKeyDer::from_pem_file(key)
            .map_err(|err| TlsError::Key { path: key.to_owned(), reason: err.to_string() })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, private_key))
            .map_err(|source| TlsError::Mismatch { cert: cert.to_owned(), key: key.to_owned(), source })?;
        let mut config = config;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsTransport { acceptor: TlsAcceptor::from(Arc::new(config)) })
    }
}

impl Transport for TlsTransport {
    type Io = TlsStream<TcpStream>;

    const SECURE: bool = true;

    async fn handshake(&self, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(tcp).await
    }
}
