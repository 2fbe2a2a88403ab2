//! OIDC ID tokens verified against the issuer's published keys: discovery, the JWKS cached and
//! fetched again when a token names a key the cache does not hold (the issuer rotated its
//! keys), issuer, audience, expiry and not-before with a small leeway, and an algorithm
//! allow-list (RS256 and ES256; `none` and every HMAC algorithm are refused before any key is
//! looked at).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes_body::Client;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::RwLock;

/// The algorithms a token may be signed with.
pub const ALLOWED_ALGORITHMS: [&str; 2] = ["RS256", "ES256"];

/// How long a token may be past `exp` or before `nbf` and still pass (clock skew).
pub const LEEWAY: Duration = Duration::from_secs(30);

/// The shortest time between two JWKS fetches caused by unknown key ids, so that tokens with
/// made-up `kid`s cannot make the gateway hammer the issuer.
pub const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// How the gateway trusts an issuer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcConfig {
    /// The issuer URL (`OIDC_ISSUER_URL`); tokens must carry exactly this `iss`.
    pub issuer: String,
    /// Accepted `aud` values (`OIDC_AUDIENCE`, default `OIDC_CLIENT_ID`); a token passes when
    /// its audience contains one of them.
    pub audiences: Vec<String>,
    /// A PEM bundle trusted besides the system's roots when talking to the issuer.
    pub ca_file: Option<PathBuf>,
}

/// Why a token was refused. [`TokenError::reason`] is the label counted in the gateway's
/// metrics.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three base64url parts with a JSON header.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// An algorithm outside the allow-list (`none`, HS256, ...).
    #[error("token algorithm {0:?} is not allowed (RS256 or ES256)")]
    Algorithm(String),
    /// A `kid` the issuer does not publish, even after fetching its keys again.
    #[error("token signed with unknown key {0:?}")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("token signature does not verify")]
    Signature,
    /// Past `exp`.
    #[error("token expired")]
    Expired,
    /// Before `nbf`.
    #[error("token not yet valid")]
    NotYetValid,
    /// Another issuer.
    #[error("token issuer is not {0}")]
    Issuer(String),
    /// Not for this audience.
    #[error("token audience is not one of {0}")]
    Audience(String),
    /// A required claim missing or of the wrong type.
    #[error("token claims: {0}")]
    Claims(String),
    /// The issuer could not be reached for its keys.
    #[error("identity provider: {0}")]
    Provider(String),
}

impl TokenError {
    /// The metric label of the reason.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::Malformed(_) => "malformed",
            TokenError::Algorithm(_) => "algorithm",
            TokenError::UnknownKey(_) => "unknown_key",
            TokenError::Signature => "signature",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::Issuer(_) => "issuer",
            TokenError::Audience(_) => "audience",
            TokenError::Claims(_) => "claims",
            TokenError::Provider(_) => "provider",
        }
    }
}

struct Keys {
    by_kid: HashMap<String, Arc<DecodingKey>>,
    fetched: Instant,
}

/// Verifies ID tokens of one issuer.
pub struct OidcVerifier {
    config: OidcConfig,
    http: Client,
    jwks_uri: String,
    endpoints: (Option<String>, Option<String>),
    keys: RwLock<Keys>,
}

impl std::fmt::Debug for OidcVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcVerifier")
            .field("issuer", &self.config.issuer)
            .field("audiences", &self.config.audiences)
            .field("jwks_uri", &self.jwks_uri)
            .finish_non_exhaustive()
    }
}

impl OidcVerifier {
    /// Reads the issuer's discovery document and its keys.
    ///
    /// # Errors
    /// A one-line reason when the issuer cannot be reached, its discovery document names
    /// another issuer, or its JWKS has no usable key.
    pub async fn discover(config: OidcConfig) -> Result<Self, String> {
        check_issuer_url(&config.issuer)?;
        let http = bytes_body::client(config.ca_file.as_deref())?;
        let base = config.issuer.trim_end_matches('/');
        let url = format!("{base}/.well-known/openid-configuration");
        let doc = bytes_body::get_json(&http, &url).await?;
        let named = doc
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if named != config.issuer {
            return Err(format!(
                "{url} names the issuer {named:?}, not {:?} (OIDC_ISSUER_URL must match it exactly)",
                config.issuer
            ));
        }
        let jwks_uri = doc
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{url} has no jwks_uri"))?
            .to_owned();
        let endpoint = |name: &str| doc.get(name).and_then(Value::as_str).map(str::to_owned);
        let endpoints = (
            endpoint("authorization_endpoint"),
            endpoint("token_endpoint"),
        );
        let by_kid = fetch_keys(&http, &jwks_uri).await?;
        if by_kid.is_empty() {
            return Err(format!(
                "{jwks_uri} publishes no RS256 or ES256 key with a kid"
            ));
        }
        Ok(Self {
            config,
            http,
            jwks_uri,
            endpoints,
            keys: RwLock::new(Keys {
                by_kid,
                fetched: Instant::now(),
            }),
        })
    }

    /// The issuer this verifier trusts.
    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    /// The issuer's authorization and token endpoints, from its discovery document.
    pub fn endpoints(&self) -> &(Option<String>, Option<String>) {
        &self.endpoints
    }

    /// How many keys are cached.
    pub async fn key_count(&self) -> usize {
        self.keys.read().await.by_kid.len()
    }

    /// Verifies a token and returns its claims.
    ///
    /// # Errors
    /// [`TokenError`] naming the first check that failed.
    pub async fn verify(&self, token: &str) -> Result<Map<String, Value>, TokenError> {
        let (alg, kid) = header_of(token)?;
        let key = self.key(&kid).await?;
        let mut v = Validation::new(alg);
        v.leeway = LEEWAY.as_secs();
        v.validate_nbf = true;
        v.set_issuer(&[&self.config.issuer]);
        v.set_audience(&self.config.audiences);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| self.token_error(&e))?;
        Ok(data.claims)
    }

    fn token_error(&self, e: &jsonwebtoken::errors::Error) -> TokenError {
        use jsonwebtoken::errors::ErrorKind as K;
        match e.kind() {
            K::InvalidSignature | K::InvalidEcdsaKey | K::InvalidRsaKey(_) => TokenError::Signature,
            K::ExpiredSignature => TokenError::Expired,
            K::ImmatureSignature => TokenError::NotYetValid,
            K::InvalidIssuer => TokenError::Issuer(self.config.issuer.clone()),
            K::InvalidAudience => TokenError::Audience(self.config.audiences.join(", ")),
            K::InvalidAlgorithm | K::MissingAlgorithm | K::InvalidAlgorithmName => {
                TokenError::Algorithm("a key of another family".to_owned())
            }
            K::MissingRequiredClaim(c) => TokenError::Claims(format!("{c} is required")),
            K::Json(_) | K::Utf8(_) | K::Base64(_) | K::InvalidToken => {
                TokenError::Malformed(e.to_string())
            }
            _ => TokenError::Claims(e.to_string()),
        }
    }

    /// The key of `kid`, fetching the issuer's keys again (at most every
    /// [`REFETCH_AT_MOST_EVERY`]) when it is not cached: that is how a rotation is followed.
    async fn key(&self, kid: &str) -> Result<Arc<DecodingKey>, TokenError> {
        {
            let keys = self.keys.read().await;
            if let Some(k) = keys.by_kid.get(kid) {
                return Ok(Arc::clone(k));
            }
            if keys.fetched.elapsed() < REFETCH_AT_MOST_EVERY {
                return Err(TokenError::UnknownKey(kid.to_owned()));
            }
        }
        let mut keys = self.keys.write().await;
        if keys.fetched.elapsed() >= REFETCH_AT_MOST_EVERY {
            keys.fetched = Instant::now();
            let fresh = fetch_keys(&self.http, &self.jwks_uri)
                .await
                .map_err(TokenError::Provider)?;
            tracing::info!(
                jwks = %self.jwks_uri,
                before = keys.by_kid.len(),
                after = fresh.len(),
                "fetched the issuer's keys again (a token named an unknown key id)"
            );
            keys.by_kid = fresh;
        }
        keys.by_kid
            .get(kid)
            .cloned()
            .ok_or_else(|| TokenError::UnknownKey(kid.to_owned()))
    }
}

/// An issuer must be `https://`, except on the loopback interface (a local test issuer).
///
/// # Errors
/// A one-line reason naming `OIDC_ISSUER_URL`.
pub fn check_issuer_url(issuer: &str) -> Result<(), String> {
    let uri: http::Uri = issuer
        .parse()
        .map_err(|e| format!("OIDC_ISSUER_URL {issuer:?} is not a URL: {e}"))?;
    let loopback = matches!(
        uri.host(),
        Some("127.0.0.1" | "localhost" | "[::1]" | "::1")
    );
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if loopback => Ok(()),
        _ => Err(format!(
            "OIDC_ISSUER_URL {issuer:?} must be an https:// URL (http only on the loopback interface)"
        )),
    }
}

/// The algorithm and key id of a token's header, refusing algorithms outside
/// [`ALLOWED_ALGORITHMS`] before anything else.
///
/// # Errors
/// [`TokenError::Malformed`] or [`TokenError::Algorithm`].
pub fn header_of(token: &str) -> Result<(Algorithm, String), TokenError> {
    let mut parts = token.split('.');
    let (Some(h), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed(
            "not three dot-separated parts".to_owned(),
        ));
    };
    let raw = URL_SAFE_NO_PAD
        .decode(h)
        .map_err(|e| TokenError::Malformed(format!("header is not base64url: {e}")))?;
    let header: Map<String, Value> = serde_json::from_slice(&raw)
        .map_err(|e| TokenError::Malformed(format!("header is not a JSON object: {e}")))?;
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("none");
    let alg = match alg {
        "RS256" => Algorithm::RS256,
        "ES256" => Algorithm::ES256,
        other => return Err(TokenError::Algorithm(other.to_owned())),
    };
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .ok_or_else(|| TokenError::Malformed("header has no kid".to_owned()))?;
    Ok((alg, kid.to_owned()))
}

/// The RS256 and ES256 keys of a JWKS by `kid` (others are skipped).
///
/// # Errors
/// A one-line reason when the JWKS cannot be fetched or parsed.
async fn fetch_keys(
    http: &Client,
    jwks_uri: &str,
) -> Result<HashMap<String, Arc<DecodingKey>>, String> {
    let doc = bytes_body::get_json(http, jwks_uri).await?;
    keys_of(doc).map_err(|e| format!("{jwks_uri}: {e}"))
}

/// The usable keys of a JWKS document.
///
/// # Errors
/// When the document is not a JWKS.
pub fn keys_of(doc: Value) -> Result<HashMap<String, Arc<DecodingKey>>, String> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve};
    let set: JwkSet = serde_json::from_value(doc).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut out = HashMap::new();
    for jwk in &set.keys {
        let Some(kid) = jwk.common.key_id.clone() else {
            continue;
        };
        let usable = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => true,
            AlgorithmParameters::EllipticCurve(ec) => ec.curve == EllipticCurve::P256,
            _ => false,
        };
        if !usable {
            continue;
        }
        if let Ok(key) = DecodingKey::from_jwk(jwk) {
            out.insert(kid, Arc::new(key));
        }
    }
    Ok(out)
}

/// A small HTTPS GET client for the issuer (system roots plus an optional PEM bundle).
mod bytes_body {
    use std::path::Path;
    use std::time::Duration;

    use http_body_util::{BodyExt as _, Empty};
    use hyper::body::Bytes;
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    use serde_json::Value;

    pub type Client = HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

    const TIMEOUT: Duration = Duration::from_secs(10);

    pub fn client(ca_file: Option<&Path>) -> Result<Client, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = ca_file {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("read CA file {}: {e}", path.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("read CA file {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("CA file {} holds no certificate", path.display()));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| format!("CA file {}: {e}", path.display()))?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(HyperClient::builder(TokioExecutor::new()).build(https))
    }

    pub async fn get_json(client: &Client, url: &str) -> Result<Value, String> {
        let req = http::Request::get(url)
            .header("accept", "application/json")
            .body(Empty::new())
            .map_err(|e| format!("{url}: {e}"))?;
        let resp = tokio::time::timeout(TIMEOUT, client.request(req))
            .await
            .map_err(|_| format!("{url}: no answer within {TIMEOUT:?}"))?
            .map_err(|e| format!("{url}: {}", crate::webhook::chain(&e)))?;
        let status = resp.status();
        let body = tokio::time::timeout(TIMEOUT, resp.into_body().collect())
            .await
            .map_err(|_| format!("{url}: the answer did not finish within {TIMEOUT:?}"))?
            .map_err(|e| format!("{url}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("{url} answered HTTP {status}"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    }

    #[test]
    fn only_rs256_and_es256_headers_pass_and_none_or_hmac_never() {
        let t = |h: Value| format!("{}.e30.sig", b64(&h));
        assert_eq!(
            header_of(&t(serde_json::json!({"alg": "RS256", "kid": "k"}))).unwrap(),
            (Algorithm::RS256, "k".to_owned())
        );
        assert!(header_of(&t(serde_json::json!({"alg": "ES256", "kid": "k"}))).is_ok());
        for alg in ["none", "HS256", "HS512", "RS512", "EdDSA"] {
            assert_eq!(
                header_of(&t(serde_json::json!({"alg": alg, "kid": "k"}))),
                Err(TokenError::Algorithm(alg.to_owned()))
            );
        }
        assert_eq!(
            header_of(&t(serde_json::json!({"kid": "k"}))),
            Err(TokenError::Algorithm("none".to_owned()))
        );
        assert!(matches!(
            header_of(&t(serde_json::json!({"alg": "RS256"}))),
            Err(TokenError::Malformed(_))
        ));
        for bad in ["", "a.b", "a.b.c.d", "!!.e30.x", "e30"] {
            assert!(
                matches!(header_of(bad), Err(TokenError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_jwks_keeps_rsa_and_p256_keys_with_a_kid() {
        let doc = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "r", "use": "sig", "alg": "RS256",
             "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw",
             "e": "AQAB"},
            {"kty": "EC", "kid": "e", "crv": "P-256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "oct", "kid": "h", "k": "c2VjcmV0"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB"}
        ]});
        let keys = keys_of(doc).unwrap();
        let mut kids: Vec<&String> = keys.keys().collect();
        kids.sort();
        assert_eq!(
            kids,
            vec!["e", "r"],
            "HMAC keys and keys without a kid are skipped"
        );
        assert!(keys_of(serde_json::json!({"nokeys": 1})).is_err());
    }

    #[test]
    fn issuers_are_https_or_local() {
        assert!(check_issuer_url("https://dex.example/dex").is_ok());
        assert!(check_issuer_url("http://127.0.0.1:5556/dex").is_ok());
        assert!(check_issuer_url("http://dex.example/dex").is_err());
        assert!(check_issuer_url("dex").is_err());
    }

    #[test]
    fn reasons_are_stable_labels() {
        assert_eq!(TokenError::Expired.reason(), "expired");
        assert_eq!(TokenError::UnknownKey("k".into()).reason(), "unknown_key");
        assert_eq!(TokenError::Algorithm("none".into()).reason(), "algorithm");
    }
}

#[cfg(test)]
mod fuzz {
    //! The token header reader sees every presented bearer token first: it never panics, and it
    //! lets through only RS256 and ES256 with a key id.

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        #[test]
        fn any_string_is_read_without_panic(s in ".{0,300}") {
            if let Ok((alg, _kid)) = header_of(&s) {
                prop_assert!(matches!(alg, Algorithm::RS256 | Algorithm::ES256));
            }
        }

        #[test]
        fn any_header_json_is_refused_unless_rs256_or_es256(
            alg in prop_oneof![Just("none".to_owned()), Just("HS256".to_owned()), Just("RS256".to_owned()),
                               Just("ES256".to_owned()), "[A-Za-z0-9]{0,8}"],
            kid in proptest::option::of("[ -~]{0,20}"),
            payload in "[A-Za-z0-9_-]{0,40}", sig in "[A-Za-z0-9_-]{0,40}",
        ) {
            let mut h = serde_json::json!({"alg": alg});
            if let Some(k) = &kid {
                h["kid"] = serde_json::json!(k);
            }
            let token = format!("{}.{payload}.{sig}", URL_SAFE_NO_PAD.encode(h.to_string()));
            let read = header_of(&token);
            match (alg.as_str(), &kid) {
                ("RS256" | "ES256", Some(k)) => prop_assert_eq!(read.map(|r| r.1), Ok(k.clone())),
                ("RS256" | "ES256", None) => prop_assert!(matches!(read, Err(TokenError::Malformed(_)))),
                _ => prop_assert!(matches!(read, Err(TokenError::Algorithm(_)))),
            }
        }
    }
}
