//! TLS as ZooKeeper configures it, on the client port (`secureClientPort`, `ssl.*`) and
//! between members (`sslQuorum`, `portUnification`, `ssl.quorum.*`): the key
//! and trust stores read from PEM or PKCS#12 files (ZooKeeper's `KeyStoreFileType`), rustls'
//! server configuration built from them (client authentication `none`/`want`/`need`, protocol
//! versions, cipher suites), its reload when the store files change (ZooKeeper 3.9's
//! `FileChangeWatcher`), and a verified client certificate's subject in the RFC 2253 form
//! Java's `X500Principal.getName()` gives, which the `x509` scheme uses as the identity.
//!
//! This module knows nothing of ZooKeeper's protocol; the client port wraps accepted
//! connections with the [`Acceptor`] it builds, the peer port and its clients theirs with
//! [`QuorumTls`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;
use std::time::SystemTime;

use rustls::client::danger::ServerCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::PrivatePkcs8KeyDer;

use crate::config::ClientAuth;
use crate::config::QuorumTlsConfig;
use crate::config::StoreConfig;
use crate::config::TlsConfig;

/// A store or setting that cannot be used: start-up stops with the key named.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {why}")]
pub struct TlsError {
    /// The zoo.cfg key whose value is at fault.
    pub key: String,
    pub why: String,
}

fn err(key: impl Into<String>, why: impl Into<String>) -> TlsError {
    TlsError { key: key.into(), why: why.into() }
}

/// A store's file type, from `ssl.*Store.type` or else the file's extension (ZooKeeper's
/// `KeyStoreFileType.fromPropertyValueOrFileName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreType {
    Pem,
    Pkcs12,
}

fn store_type(store: &StoreConfig, type_key: &str, location_key: &str) -> Result<StoreType, TlsError> {
    let (key, named) = match &store.store_type {
        Some(t) if !t.trim().is_empty() => (type_key.to_owned(), t.trim().to_ascii_uppercase()),
        _ => {
            let ext = store.location.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_uppercase();
            (location_key.to_owned(), ext)
        }
    };
    match named.as_str() {
        "PEM" | "CRT" | "CER" => Ok(StoreType::Pem),
        "PKCS12" | "P12" | "PFX" => Ok(StoreType::Pkcs12),
        "JKS" => Err(err(
            key,
            format!(
                "{}: JKS stores are not read by Warden (no Java here); convert it once with \
                 `keytool -importkeystore -srckeystore {0} -srcstoretype JKS -destkeystore store.p12 \
                 -deststoretype PKCS12` and point the key at store.p12 (type PKCS12), or use PEM",
                store.location.display()
            ),
        )),
        "BCFKS" => Err(err(key, "BCFKS stores are not supported; use PEM or PKCS12")),
        "" => Err(err(
            key,
            format!(
                "{}: cannot tell the store's type from its name; set the matching ssl.*Store.type to PEM or PKCS12",
                store.location.display()
            ),
        )),
        other => Err(err(key, format!("unknown store type {other:?}; expected PEM or PKCS12"))),
    }
}

fn read(store: &StoreConfig, key: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(&store.location).map_err(|e| err(key, format!("{}: {e}", store.location.display())))
}

/// The server's certificate chain and private key.
struct KeyMaterial {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// The PEM block `label` in `text`, whole (markers included), if there is one.
fn pem_block<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)?;
    let stop = text[start..].find(&end)? + start + end.len();
    Some(&text[start..stop])
}

/// PKCS#12's `pbeWithSHAAnd3-KeyTripleDES-CBC`, what `openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES`
/// (and older tools by default) writes, and Java reads.
const PBE_SHA1_3DES: der::asn1::ObjectIdentifier = der::asn1::ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.1.3");

/// `EncryptedPrivateKeyInfo` (RFC 5958), its algorithm left open.
#[derive(der::Sequence)]
struct EncryptedKey {
    algorithm: spki::AlgorithmIdentifierOwned,
    data: der::asn1::OctetString,
}

/// PKCS#12 PBE parameters (RFC 7292 appendix C).
#[derive(der::Sequence)]
struct Pkcs12PbeParams {
    salt: der::asn1::OctetString,
    iterations: u32,
}

/// Decrypts an `ENCRYPTED PRIVATE KEY` (its DER) to PKCS#8: PBES2 (PBKDF2 with AES or
/// 3DES, openssl's default) through the pkcs8 crate, PKCS#12's PBE-SHA1-3DES with the PKCS#12
/// key derivation, as Java's `EncryptedPrivateKeyInfo` reads both.
fn decrypt_key(der_bytes: &[u8], password: &str) -> Result<Vec<u8>, String> {
    use cbc::cipher::block_padding::Pkcs7;
    use cbc::cipher::BlockDecryptMut;
    use cbc::cipher::KeyIvInit;
    use der::Decode;
    let info = EncryptedKey::from_der(der_bytes).map_err(|e| e.to_string())?;
    if info.algorithm.oid != PBE_SHA1_3DES {
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der_bytes)
            .map_err(|e| format!("{e} (encryption {} not supported)", info.algorithm.oid))?;
        return info.decrypt(password.as_bytes()).map(|d| d.as_bytes().to_vec()).map_err(|e| e.to_string());
    }
    let params = info
        .algorithm
        .parameters
        .as_ref()
        .ok_or("PBE parameters missing")?
        .decode_as::<Pkcs12PbeParams>()
        .map_err(|e| e.to_string())?;
    let rounds = i32::try_from(params.iterations).map_err(|_| "iteration count too large")?;
    let derive = |kind, len| {
        pkcs12::kdf::derive_key_utf8::<sha1::Sha1>(password, params.salt.as_bytes(), kind, rounds, len)
            .map_err(|e| e.to_string())
    };
    let key = derive(pkcs12::kdf::Pkcs12KeyType::EncryptionKey, 24)?;
    let iv = derive(pkcs12::kdf::Pkcs12KeyType::Iv, 8)?;
    cbc::Decryptor::<des::TdesEde3>::new_from_slices(&key, &iv)
        .map_err(|e| e.to_string())?
        .decrypt_padded_vec_mut::<Pkcs7>(info.data.as_bytes())
        .map_err(|_| "wrong password (the decrypted key does not unpad)".to_string())
}

fn load_key_store(tls: &TlsConfig, store: &StoreConfig) -> Result<KeyMaterial, TlsError> {
    let (loc, pw) = (tls.key("keyStore.location"), tls.key("keyStore.password"));
    let (loc, pw) = (loc.as_str(), pw.as_str());
    let bytes = read(store, loc)?;
    let password = store.password.as_ref().map(|p| p.expose().to_owned()).unwrap_or_default();
    match store_type(store, &tls.key("keyStore.type"), loc)? {
        StoreType::Pem => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<_, _>>()
                .map_err(|e| err(loc, format!("{}: {e}", store.location.display())))?;
            if chain.is_empty() {
                return Err(err(loc, format!("{}: holds no CERTIFICATE", store.location.display())));
            }
            let text = String::from_utf8_lossy(&bytes);
            let key = if let Some(block) = pem_block(&text, "ENCRYPTED PRIVATE KEY") {
                if password.is_empty() {
                    return Err(err(pw, "the key store's private key is encrypted and no password is set"));
                }
                let (_, der) = pkcs8::der::pem::decode_vec(block.as_bytes())
                    .map_err(|e| err(loc, format!("{}: {e}", store.location.display())))?;
                let plain = decrypt_key(&der, &password).map_err(|why| {
                    err(pw, format!("cannot decrypt the private key in {}: {why}", store.location.display()))
                })?;
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(plain))
            } else {
                PrivateKeyDer::from_pem_slice(&bytes)
                    .map_err(|e| err(loc, format!("{}: no usable private key: {e}", store.location.display())))?
            };
            Ok(KeyMaterial { chain, key })
        }
        StoreType::Pkcs12 => {
            let ks = p12_keystore::KeyStore::from_pkcs12(&bytes, &password)
                .map_err(|e| err(pw, format!("cannot open {}: {e}", store.location.display())))?;
            let (_, chain) = ks
                .private_key_chain()
                .ok_or_else(|| err(loc, format!("{}: holds no private key entry", store.location.display())))?;
            let certs: Vec<CertificateDer<'static>> =
                chain.chain().iter().map(|c| CertificateDer::from(c.as_der().to_vec())).collect();
            if certs.is_empty() {
                return Err(err(loc, format!("{}: its key has no certificate", store.location.display())));
            }
            Ok(KeyMaterial { chain: certs, key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().to_vec())) })
        }
    }
}

fn load_trust_store(tls: &TlsConfig, store: &StoreConfig) -> Result<RootCertStore, TlsError> {
    let loc = tls.key("trustStore.location");
    let loc = loc.as_str();
    let bytes = read(store, loc)?;
    let certs: Vec<CertificateDer<'static>> = match store_type(store, &tls.key("trustStore.type"), loc)? {
        StoreType::Pem => CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<_, _>>()
            .map_err(|e| err(loc, format!("{}: {e}", store.location.display())))?,
        StoreType::Pkcs12 => {
            let password = store.password.as_ref().map(|p| p.expose().to_owned()).unwrap_or_default();
            let ks = p12_keystore::KeyStore::from_pkcs12(&bytes, &password).map_err(|e| {
                err(tls.key("trustStore.password"), format!("cannot open {}: {e}", store.location.display()))
            })?;
            ks.entries()
                .flat_map(|(_, entry)| match entry {
                    p12_keystore::KeyStoreEntry::Certificate(c) => vec![CertificateDer::from(c.as_der().to_vec())],
                    p12_keystore::KeyStoreEntry::PrivateKeyChain(k) => {
                        k.chain().iter().map(|c| CertificateDer::from(c.as_der().to_vec())).collect()
                    }
                    p12_keystore::KeyStoreEntry::Secret(_) => Vec::new(),
                })
                .collect()
        }
    };
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(err(loc, format!("{}: holds no usable CA certificate", store.location.display())));
    }
    Ok(roots)
}

/// ZooKeeper's (Java's) protocol name -> rustls' version.
fn protocol(name: &str) -> Option<&'static rustls::SupportedProtocolVersion> {
    match name.trim() {
        "TLSv1.3" => Some(&rustls::version::TLS13),
        "TLSv1.2" => Some(&rustls::version::TLS12),
        _ => None,
    }
}

/// The protocol versions to offer: `ssl.enabledProtocols`, else `ssl.protocol` (with
/// `TLS`/unset meaning both 1.2 and 1.3, the versions Java negotiates by default).
fn versions(tls: &TlsConfig) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    if let Some(list) = &tls.enabled_protocols {
        let mut out = Vec::new();
        for name in list {
            match protocol(name) {
                Some(v) => out.push(v),
                None => tracing::warn!(
                    protocol = name.as_str(),
                    "ssl.enabledProtocols: not offered (only TLSv1.2 and TLSv1.3 are)"
                ),
            }
        }
        if out.is_empty() {
            return Err(err(tls.key("enabledProtocols"), "names no protocol Warden offers (TLSv1.2, TLSv1.3)"));
        }
        return Ok(out);
    }
    match tls.protocol.as_deref().map(str::trim) {
        None | Some("TLS") | Some("") => Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]),
        Some(name) => protocol(name)
            .map(|v| vec![v])
            .ok_or_else(|| err(tls.key("protocol"), format!("{name:?}: expected TLSv1.2, TLSv1.3 or TLS"))),
    }
}

/// A rustls suite's IANA name as Java writes it (`TLS13_AES_128_GCM_SHA256` is Java's
/// `TLS_AES_128_GCM_SHA256`).
fn java_name(suite: rustls::SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

fn provider(tls: &TlsConfig) -> Result<rustls::crypto::CryptoProvider, TlsError> {
    // ring, not aws-lc-rs (which needs cmake and a C toolchain's extras to build); rustls
    // marks ring's provider deprecated only for lacking post-quantum key exchange.
    #[allow(deprecated)]
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(wanted) = &tls.ciphersuites {
        let known: Vec<String> = provider.cipher_suites.iter().map(|s| java_name(*s)).collect();
        for name in wanted.iter().filter(|n| !known.iter().any(|k| k.eq_ignore_ascii_case(n.trim()))) {
            tracing::warn!(suite = name.as_str(), "ssl.ciphersuites: not implemented by rustls, not offered");
        }
        provider.cipher_suites.retain(|s| wanted.iter().any(|n| n.trim().eq_ignore_ascii_case(&java_name(*s))));
        if provider.cipher_suites.is_empty() {
            return Err(err(
                tls.key("ciphersuites"),
                format!("names no suite Warden offers; these are: {}", known.join(",")),
            ));
        }
    }
    Ok(provider)
}

/// Builds rustls' server configuration from the stores and settings.
pub fn server_config(tls: &TlsConfig) -> Result<ServerConfig, TlsError> {
    let key_store =
        tls.key_store.as_ref().ok_or_else(|| err(tls.key("keyStore.location"), "TLS is on and no key store is set"))?;
    let material = load_key_store(tls, key_store)?;
    let provider = Arc::new(provider(tls)?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(tls)?)
        .map_err(|e| err(tls.key("ciphersuites"), format!("no suite fits the protocols: {e}")))?;
    let builder = match tls.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let store = tls.trust_store.as_ref().ok_or_else(|| {
                err(
                    tls.key("trustStore.location"),
                    "client certificates are asked for (ssl.clientAuth) and no trust store is set",
                )
            })?;
            let roots = Arc::new(load_trust_store(tls, store)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if auth == ClientAuth::Want { verifier.allow_unauthenticated() } else { verifier };
            let verifier = verifier.build().map_err(|e| err(tls.key("trustStore.location"), e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(material.chain, material.key)
        .map_err(|e| err(tls.key("keyStore.location"), format!("the key and its certificate do not go together: {e}")))
}

/// Builds rustls' client configuration a member connects to another with: its own
/// certificate from the key store, the other's checked against the trust store and, with
/// `verify_hostname`, against the host it dialled (`ssl.quorum.hostnameVerification`).
pub fn client_config(tls: &TlsConfig, verify_hostname: bool) -> Result<rustls::ClientConfig, TlsError> {
    let key_store = tls.key_store.as_ref().ok_or_else(|| err(tls.key("keyStore.location"), "no key store is set"))?;
    let material = load_key_store(tls, key_store)?;
    let trust = tls.trust_store.as_ref().ok_or_else(|| err(tls.key("trustStore.location"), "no trust store is set"))?;
    let roots = Arc::new(load_trust_store(tls, trust)?);
    let provider = Arc::new(provider(tls)?);
    let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| err(tls.key("trustStore.location"), e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = if verify_hostname { webpki } else { Arc::new(AnyName(webpki)) };
    rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(tls)?)
        .map_err(|e| err(tls.key("ciphersuites"), format!("no suite fits the protocols: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(material.chain, material.key)
        .map_err(|e| err(tls.key("keyStore.location"), format!("the key and its certificate do not go together: {e}")))
}

/// A server certificate check that takes any name: the chain must still lead to a trusted
/// CA and be valid now (webpki checks the chain before the name, so a name mismatch is the
/// only error let through).
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::NotValidForName;
        use rustls::CertificateError::NotValidForNameContext;
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(NotValidForName | NotValidForNameContext { .. })) => {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// TLS between members, built from the quorum's settings: how the peer port accepts
/// connections and how this member opens its own. With `sslQuorumReloadCertFiles`
/// ([`QuorumTls::reload`]) both are built again when the store files change; open
/// connections keep what they were made with.
pub struct QuorumTls {
    /// TLS on the peer port; `None`: plaintext only.
    acceptor: Option<RwLock<tokio_rustls::TlsAcceptor>>,
    /// Plaintext connections are taken too (no TLS at all, or `portUnification`).
    pub accept_plain: bool,
    /// TLS for the connections this member opens (`sslQuorum`).
    connector: Option<RwLock<tokio_rustls::TlsConnector>>,
    /// A connecting member's certificate must name the address it connects from.
    pub verify_peer_address: bool,
    /// What it was built from (to build it again).
    settings: QuorumTlsConfig,
}

impl QuorumTls {
    /// Members talk in the clear (no `sslQuorum`, no `portUnification`).
    pub fn plain() -> QuorumTls {
        QuorumTls {
            acceptor: None,
            accept_plain: true,
            connector: None,
            verify_peer_address: false,
            settings: QuorumTlsConfig::default(),
        }
    }

    /// From the quorum's settings; errors name the zoo.cfg key at fault.
    pub fn new(q: &QuorumTlsConfig) -> Result<QuorumTls, TlsError> {
        if !q.enabled() {
            return Ok(QuorumTls::plain());
        }
        let (acceptor, connector) = Self::build(q)?;
        Ok(QuorumTls {
            acceptor: Some(RwLock::new(acceptor)),
            accept_plain: q.port_unification,
            connector: connector.map(RwLock::new),
            verify_peer_address: q.verify_client_hostname(),
            settings: q.clone(),
        })
    }

    fn build(q: &QuorumTlsConfig) -> Result<(tokio_rustls::TlsAcceptor, Option<tokio_rustls::TlsConnector>), TlsError> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&q.tls)?));
        let client = client_config(&q.tls, q.hostname_verification)?;
        Ok((acceptor, q.ssl_quorum.then(|| tokio_rustls::TlsConnector::from(Arc::new(client)))))
    }

    /// The acceptor for a new connection to the peer port; `None`: plaintext only.
    pub fn acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.acceptor.as_ref().map(|a| a.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    /// The connector for a new connection to another member; `None`: plaintext.
    pub fn connector(&self) -> Option<tokio_rustls::TlsConnector> {
        self.connector.as_ref().map(|c| c.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    /// Whether [`QuorumTls::reload`] should run (`sslQuorumReloadCertFiles`).
    pub fn reloads(&self) -> bool {
        self.settings.reload_cert_files && self.acceptor.is_some()
    }

    /// Watches the quorum's store files until `stop`: a change builds acceptor and connector
    /// again; one that does not build is logged and the old ones kept.
    pub async fn reload(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut seen = stamps(&self.settings.tls);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RELOAD_CHECK) => {}
                _ = stop.changed() => return,
            }
            let now = stamps(&self.settings.tls);
            if now == seen {
                continue;
            }
            seen = now;
            match Self::build(&self.settings) {
                Ok((acceptor, connector)) => {
                    if let Some(a) = &self.acceptor {
                        *a.write().unwrap_or_else(std::sync::PoisonError::into_inner) = acceptor;
                    }
                    if let (Some(c), Some(new)) = (&self.connector, connector) {
                        *c.write().unwrap_or_else(std::sync::PoisonError::into_inner) = new;
                    }
                    tracing::info!(
                        "quorum TLS stores changed: reloaded (sslQuorumReloadCertFiles); open connections keep theirs"
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "quorum TLS stores changed but cannot be used; keeping the old ones")
                }
            }
        }
    }
}

/// Whether a certificate names `ip`: an IP address among its subject alternative names, or
/// a DNS name there (the subject's CN when it has none) that resolves to `ip` (ZooKeeper's
/// `ZKTrustManager` checks the address, then the name it resolves back to).
pub async fn names_address(cert: &[u8], ip: std::net::IpAddr) -> bool {
    use x509_parser::extensions::GeneralName;
    let ip = ip.to_canonical();
    let names: Vec<String> = {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert) else { return false };
        let mut dns = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::IPAddress(b) => {
                        let named = match b.len() {
                            4 => <[u8; 4]>::try_from(*b).ok().map(std::net::IpAddr::from),
                            16 => <[u8; 16]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_canonical()),
                            _ => None,
                        };
                        if named == Some(ip) {
                            return true;
                        }
                    }
                    GeneralName::DNSName(n) if !n.starts_with("*.") => dns.push((*n).to_owned()),
                    _ => {}
                }
            }
        } else if let Some(cn) = cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()) {
            dns.push(cn.to_owned());
        }
        dns
    };
    for name in names {
        let resolved = tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host((name.as_str(), 0))).await;
        if let Ok(Ok(mut addrs)) = resolved {
            if addrs.any(|a| a.ip().to_canonical() == ip) {
                return true;
            }
        }
    }
    false
}

/// The files whose change makes the configuration be built again, with their last seen
/// modification times.
fn stamps(tls: &TlsConfig) -> Vec<(PathBuf, Option<SystemTime>)> {
    [&tls.key_store, &tls.trust_store]
        .into_iter()
        .flatten()
        .map(|s| (s.location.clone(), std::fs::metadata(&s.location).and_then(|m| m.modified()).ok()))
        .collect()
}

/// How often the store files are looked at for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// The client port's TLS acceptor, rebuilt when its store files change; connections already
/// open keep the configuration they were accepted with.
pub struct Acceptor {
    settings: TlsConfig,
    current: RwLock<tokio_rustls::TlsAcceptor>,
}

impl Acceptor {
    /// Builds the acceptor; errors name the zoo.cfg key at fault.
    pub fn new(settings: &TlsConfig) -> Result<Arc<Acceptor>, TlsError> {
        let config = server_config(settings)?;
        Ok(Arc::new(Acceptor {
            settings: settings.clone(),
            current: RwLock::new(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        }))
    }

    /// The acceptor for a new connection.
    pub fn current(&self) -> tokio_rustls::TlsAcceptor {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Watches the store files until `stop`: a change (a new modification time) builds the
    /// configuration again; one that does not build is logged and the old one kept.
    pub async fn reload(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut seen = stamps(&self.settings);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RELOAD_CHECK) => {}
                _ = stop.changed() => return,
            }
            let now = stamps(&self.settings);
            if now == seen {
                continue;
            }
            seen = now;
            match server_config(&self.settings) {
                Ok(config) => {
                    *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        tokio_rustls::TlsAcceptor::from(Arc::new(config));
                    tracing::info!("TLS key or trust store changed: reloaded; open connections keep theirs");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TLS key or trust store changed but cannot be used; keeping the old one")
                }
            }
        }
    }
}

/// RFC 2253 attribute keywords Java's `X500Principal.getName()` writes by name.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// An attribute value escaped as RFC 2253 section 2.4 says.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, ch) in value.chars().enumerate() {
        let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (ch == '#' || ch == ' '))
            || (i == last && ch == ' ');
        if special {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// The subject of a DER certificate as Java's `X500Principal.getName()` (RFC 2253) writes it:
/// the RDNs last to first, joined by `,`, a multi-valued RDN's parts by `+`; known keywords
/// by name with the value as a string, others as `OID=#` and the value's DER in hex.
pub fn subject_dn(cert: &[u8]) -> Option<String> {
    use x509_parser::der_parser::asn1_rs::ToDer;
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter_rdn() {
        let mut parts = Vec::new();
        for atv in rdn.iter() {
            let oid = atv.attr_type().to_id_string();
            match (keyword(&oid), atv.as_str()) {
                (Some(k), Ok(v)) => parts.push(format!("{k}={}", escape(v))),
                _ => {
                    let der = atv.attr_value().to_der_vec().ok()?;
                    let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                    parts.push(format!("{oid}=#{hex}"));
                }
            }
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2253_escaping() {
        assert_eq!(escape("a,b"), "a\\,b");
        assert_eq!(escape("#x"), "\\#x");
        assert_eq!(escape(" x "), "\\ x\\ ");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn store_types() {
        let s = |loc: &str, t: Option<&str>| StoreConfig {
            location: PathBuf::from(loc),
            password: None,
            store_type: t.map(str::to_owned),
        };
        assert_eq!(store_type(&s("/k.pem", None), "t", "l").unwrap(), StoreType::Pem);
        assert_eq!(store_type(&s("/k.p12", None), "t", "l").unwrap(), StoreType::Pkcs12);
        assert_eq!(store_type(&s("/k.bin", Some("pkcs12")), "t", "l").unwrap(), StoreType::Pkcs12);
        let jks = store_type(&s("/k.jks", None), "t", "l").unwrap_err();
        assert_eq!(jks.key, "l");
        assert!(jks.why.contains("keytool -importkeystore"), "{}", jks.why);
        assert_eq!(store_type(&s("/k.bin", None), "t", "l").unwrap_err().key, "l");
    }
}
