//! Test certificates (rcgen): a CA and the leaves it signs, as PEM text,
//! for the tests that run TLS to clients and to servers (`tests/tls.rs`,
//! `tests/pgbouncer_parity.rs`).

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

/// A self-signed CA named `name`, and its certificate as PEM.
pub fn ca(name: &str) -> (Issuer<'static, KeyPair>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (Issuer::new(params, key), pem)
}

/// A certificate `ca` signs for `names` (host names or IP addresses; the
/// first is also the common name) and `purpose`, and its key, as PEM.
pub fn leaf(ca: &Issuer<'static, KeyPair>, names: &[&str], purpose: ExtendedKeyUsagePurpose) -> (String, String) {
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().unwrap();
    (params.signed_by(&key, ca).unwrap().pem(), key.serialize_pem())
}
