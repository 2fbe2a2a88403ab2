//! API keys: created for a user (optionally limited to one tenant and to reading), shown once,
//! stored only as an argon2id hash in a Secret of the gateway's namespace, expiring and
//! revocable. The gateway reads them through a watch of those Secrets, so a revoked key (its
//! Secret deleted) stops working as soon as the watch delivers the deletion.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use futures::StreamExt as _;
use gryvia_reconcile::gateway::{ApiKeyRecord, ApiKeyToken, Scope};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use ring::rand::{SecureRandom as _, SystemRandom};
use sha2::{Digest as _, Sha256};

use crate::{Error, Result};

/// The label every API key Secret carries.
pub const API_KEY_LABEL: &str = "gryvia.io/api-key";
/// The Secret key holding the argon2id hash (PHC string).
pub const HASH_KEY: &str = "hash";
/// The Secret key holding the record (JSON).
pub const RECORD_KEY: &str = "record";

/// The name of the Secret of key `id`.
pub fn secret_name(id: &str) -> String {
    format!("gryvia-apikey-{id}")
}

/// What to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewKey {
    /// A name people give it.
    pub name: String,
    /// The user it acts as.
    pub user: String,
    /// The groups it acts with.
    pub groups: Vec<String>,
    /// The one tenant it is limited to.
    pub tenant: Option<String>,
    /// Read-only or read-write.
    pub scope: Scope,
    /// When it stops working.
    pub expires: Option<jiff::Timestamp>,
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| Error::Invalid("the system's random source failed".to_owned()))?;
    Ok(hex::encode(buf))
}

/// The argon2id hash (PHC string) of a key's secret, with a fresh random salt.
///
/// # Errors
/// [`Error::Invalid`] when the random source or the hasher fails.
pub fn hash_secret(secret: &str) -> Result<String> {
    let mut salt = [0u8; 16];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| Error::Invalid("the system's random source failed".to_owned()))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| Error::Invalid(format!("salt: {e}")))?;
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Invalid(format!("hash the API key: {e}")))
}

/// Whether `secret` matches the stored hash (false for a hash that does not parse).
pub fn verify_secret(secret: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| {
        Argon2::default()
            .verify_password(secret.as_bytes(), &h)
            .is_ok()
    })
}

/// Creates a key: returns its record and the key itself, which is shown once and stored
/// nowhere (only its hash is).
///
/// # Errors
/// [`Error::Api`] when the Secret cannot be created (RBAC, namespace missing).
pub async fn create(
    client: &kube::Client,
    namespace: &str,
    new: &NewKey,
    now: jiff::Timestamp,
) -> Result<(ApiKeyRecord, String)> {
    let token = ApiKeyToken {
        id: random_hex(6)?,
        secret: random_hex(24)?,
    };
    let record = ApiKeyRecord {
        id: token.id.clone(),
        name: new.name.clone(),
        user: new.user.clone(),
        groups: new.groups.clone(),
        tenant: new.tenant.clone(),
        scope: new.scope,
        created: now,
        expires: new.expires,
    };
    let record_json = serde_json::to_vec(&record).map_err(|source| Error::Serialize {
        what: "API key record".to_owned(),
        source,
    })?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&token.id)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                API_KEY_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("gryvia.io/api-key".to_owned()),
        data: Some(BTreeMap::from([
            (
                HASH_KEY.to_owned(),
                ByteString(hash_secret(&token.secret)?.into_bytes()),
            ),
            (RECORD_KEY.to_owned(), ByteString(record_json)),
        ])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .map_err(|source| Error::Api {
            operation: format!("create API key Secret in {namespace}"),
            source,
        })?;
    Ok((record, token.format()))
}

/// The record of an API key Secret; `None` for a Secret that is not one.
pub fn record_of(secret: &Secret) -> Option<(ApiKeyRecord, String)> {
    let data = secret.data.as_ref()?;
    let record: ApiKeyRecord = serde_json::from_slice(&data.get(RECORD_KEY)?.0).ok()?;
    let hash = String::from_utf8(data.get(HASH_KEY)?.0.clone()).ok()?;
    (secret.name_any() == secret_name(&record.id)).then_some((record, hash))
}

/// Every API key, optionally only those of `user`, sorted by creation.
///
/// # Errors
/// [`Error::Api`] when the Secrets cannot be listed.
pub async fn list(
    client: &kube::Client,
    namespace: &str,
    user: Option<&str>,
) -> Result<Vec<ApiKeyRecord>> {
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("{API_KEY_LABEL}=true")))
        .await
        .map_err(|source| Error::Api {
            operation: format!("list API key Secrets in {namespace}"),
            source,
        })?;
    let mut out: Vec<ApiKeyRecord> = secrets
        .items
        .iter()
        .filter_map(record_of)
        .map(|(r, _)| r)
        .filter(|r| user.is_none_or(|u| r.user == u))
        .collect();
    out.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    Ok(out)
}

/// Revokes a key (deletes its Secret); false when there was none.
///
/// # Errors
/// [`Error::Api`] when the deletion fails for another reason than absence.
pub async fn revoke(client: &kube::Client, namespace: &str, id: &str) -> Result<bool> {
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .delete(&secret_name(id), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(source) => Err(Error::Api {
            operation: format!("delete API key {id} in {namespace}"),
            source,
        }),
    }
}

/// Why a presented key does not authenticate. [`KeyAuthError::reason`] is the metric label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyAuthError {
    /// Not the shape of a key.
    #[error("not an API key")]
    Malformed,
    /// No such key (never created, or revoked).
    #[error("API key {0} does not exist or was revoked")]
    Unknown(String),
    /// The secret part does not match.
    #[error("API key {0} does not match")]
    Mismatch(String),
}

impl KeyAuthError {
    /// The metric label of the reason.
    pub fn reason(&self) -> &'static str {
        match self {
            KeyAuthError::Malformed => "key_malformed",
            KeyAuthError::Unknown(_) => "key_unknown",
            KeyAuthError::Mismatch(_) => "key_mismatch",
        }
    }
}

/// The gateway's view of the API keys: a watch of their Secrets, and the digests of secrets
/// that already passed argon2 (per Secret version), so that a key costs one argon2 check per
/// version rather than one per request.
pub struct KeyStore {
    namespace: String,
    store: Store<Secret>,
    verified: Mutex<HashMap<String, ([u8; 32], String)>>,
    /// One argon2 check at a time per key id: concurrent first uses of a key wait for it
    /// instead of each running argon2 (a thundering herd that starved the blocking pool).
    checking: Mutex<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KeyStore {
    /// Starts watching the API key Secrets of `namespace` and waits for the first list.
    ///
    /// # Errors
    /// [`Error::Api`] when the first list does not arrive (RBAC, namespace missing).
    pub async fn start(client: &kube::Client, namespace: &str) -> Result<Self> {
        let api = Api::<Secret>::namespaced(client.clone(), namespace);
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().labels(&format!("{API_KEY_LABEL}=true"));
        let stream = watcher(api, config)
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "API key watch");
                }
            }
        });
        crate::cache::wait_ready(&store, "API key Secret").await?;
        Ok(Self {
            namespace: namespace.to_owned(),
            store,
            verified: Mutex::new(HashMap::new()),
            checking: Mutex::new(HashMap::new()),
        })
    }

    /// Whether this digest of key `id` already passed argon2 at this Secret version.
    fn known(&self, id: &str, digest: &[u8; 32], version: &str) -> bool {
        self.verified
            .lock()
            .ok()
            .and_then(|v| v.get(id).cloned())
            .is_some_and(|(d, v)| &d == digest && v == version)
    }

    /// The namespace of the keys.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The record of a presented key when it exists and its secret matches.
    ///
    /// # Errors
    /// [`KeyAuthError`] saying why not.
    pub async fn authenticate(&self, presented: &str) -> Result<ApiKeyRecord, KeyAuthError> {
        let token = ApiKeyToken::parse(presented).ok_or(KeyAuthError::Malformed)?;
        let secret = self
            .store
            .get(&ObjectRef::new(&secret_name(&token.id)).within(&self.namespace))
            .ok_or_else(|| KeyAuthError::Unknown(token.id.clone()))?;
        let (record, hash) =
            record_of(&secret).ok_or_else(|| KeyAuthError::Unknown(token.id.clone()))?;
        let version = secret.resource_version().unwrap_or_default();
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        if self.known(&token.id, &digest, &version) {
            return Ok(record);
        }
        let gate = self
            .checking
            .lock()
            .ok()
            .map(|mut c| std::sync::Arc::clone(c.entry(token.id.clone()).or_default()));
        let _turn = match &gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        if !self.known(&token.id, &digest, &version) {
            let secret_part = token.secret.clone();
            let ok = tokio::task::spawn_blocking(move || verify_secret(&secret_part, &hash))
                .await
                .unwrap_or(false);
            if !ok {
                return Err(KeyAuthError::Mismatch(token.id));
            }
            if let Ok(mut v) = self.verified.lock() {
                v.retain(|id, _| {
                    self.store
                        .get(&ObjectRef::new(&secret_name(id)).within(&self.namespace))
                        .is_some()
                });
                v.insert(token.id.clone(), (digest, version));
            }
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_argon2id_salted_and_verify_only_the_secret() {
        let a = hash_secret("s3cret").unwrap();
        let b = hash_secret("s3cret").unwrap();
        assert!(a.starts_with("$argon2id$"), "{a}");
        assert_ne!(a, b, "a fresh salt each time");
        assert!(verify_secret("s3cret", &a));
        assert!(!verify_secret("s3cret!", &a));
        assert!(!verify_secret("s3cret", "not a hash"));
    }

    #[test]
    fn a_record_is_read_only_from_a_secret_named_after_its_id() {
        let record = ApiKeyRecord {
            id: "abcdef123456".into(),
            name: "ci".into(),
            user: "alice".into(),
            groups: vec![],
            tenant: None,
            scope: Scope::Read,
            created: "2026-12-05T00:00:00Z".parse().unwrap(),
            expires: None,
        };
        let mut s = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name("abcdef123456")),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([
                (HASH_KEY.to_owned(), ByteString(b"$argon2id$x".to_vec())),
                (
                    RECORD_KEY.to_owned(),
                    ByteString(serde_json::to_vec(&record).unwrap()),
                ),
            ])),
            ..Secret::default()
        };
        assert_eq!(record_of(&s).unwrap().0, record);
        s.metadata.name = Some(secret_name("other"));
        assert!(
            record_of(&s).is_none(),
            "a record copied into another Secret is refused"
        );
    }
}
