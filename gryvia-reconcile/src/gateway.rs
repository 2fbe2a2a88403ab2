//! The gateway's policy: who a verified credential is, which tenants an identity may belong
//! to, what an API key's restrictions allow, and per-identity rate limits.
//!
//! Authorization itself is not here: the gateway acts on the cluster by impersonating the
//! identity this module derives, so Kubernetes RBAC is the one judge of what it may do. What is
//! here is what comes before (turning verified token claims or an API key record into the user
//! and groups to impersonate) and what a credential restricts beyond RBAC (an API key limited
//! to reading, or to one tenant's namespace).

use std::collections::HashMap;

use gryvia_types::{GryviaTenant, MemberKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How the gateway reads token claims (`OIDC_USERNAME_CLAIM`, `OIDC_GROUPS_CLAIM`,
/// `GRYVIA_OIDC_ADMIN_GROUPS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimMapping {
    /// The claim that names the user (default `email`).
    pub username_claim: String,
    /// The claim that lists the user's groups (default `groups`).
    pub groups_claim: String,
    /// Members of any of these groups are platform admins.
    pub admin_groups: Vec<String>,
}

impl Default for ClaimMapping {
    fn default() -> Self {
        Self {
            username_claim: "email".to_owned(),
            groups_claim: "groups".to_owned(),
            admin_groups: Vec::new(),
        }
    }
}

/// What a credential may do beyond what RBAC grants its user.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Reads only (GET).
    Read,
    /// Reads and changes.
    #[default]
    Write,
}

impl Scope {
    /// Whether a request with this HTTP method is within the scope.
    pub fn allows(self, method_reads: bool) -> bool {
        matches!(self, Scope::Write) || method_reads
    }

    /// The scope's name, as written in an API key record.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
        }
    }
}

/// How a request authenticated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "method")]
pub enum Via {
    /// An OIDC ID token.
    Oidc,
    /// An API key (its id).
    ApiKey {
        /// The key's id.
        id: String,
    },
}

/// Who a request is: the user and groups the gateway impersonates, and the restrictions of the
/// credential.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The user name the gateway impersonates.
    pub user: String,
    /// The groups the gateway impersonates.
    pub groups: Vec<String>,
    /// Whether a group is one of the admin groups.
    pub admin: bool,
    /// How the request authenticated.
    pub via: Via,
    /// What the credential allows beyond RBAC.
    pub scope: Scope,
    /// The one tenant whose namespace the credential is limited to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Why claims do not make an identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// The username claim is missing or not a non-empty string.
    #[error("the token has no usable {0:?} claim (a non-empty string)")]
    NoUsername(String),
    /// The groups claim is not a list of strings.
    #[error("the token's {0:?} claim is not a list of strings")]
    BadGroups(String),
    /// The user name would impersonate a Kubernetes system identity.
    #[error("the user name {0:?} is reserved (system: prefix)")]
    Reserved(String),
}

/// The identity of verified OIDC claims.
///
/// # Errors
/// [`ClaimError`] when the username claim is missing or empty, the groups claim is not a list
/// of strings, or a name starts with `system:` (a token must never impersonate the API
/// server's own identities).
pub fn identity_from_claims(
    claims: &Map<String, Value>,
    mapping: &ClaimMapping,
) -> Result<Identity, ClaimError> {
    let user = claims
        .get(&mapping.username_claim)
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ClaimError::NoUsername(mapping.username_claim.clone()))?
        .to_owned();
    let groups: Vec<String> = match claims.get(&mapping.groups_claim) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|g| g.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| ClaimError::BadGroups(mapping.groups_claim.clone()))?,
        Some(_) => return Err(ClaimError::BadGroups(mapping.groups_claim.clone())),
    };
    if let Some(reserved) = std::iter::once(&user)
        .chain(&groups)
        .find(|n| n.starts_with("system:"))
    {
        return Err(ClaimError::Reserved(reserved.clone()));
    }
    let admin = groups.iter().any(|g| mapping.admin_groups.contains(g));
    Ok(Identity {
        user,
        groups,
        admin,
        via: Via::Oidc,
        scope: Scope::Write,
        tenant: None,
    })
}

/// The tenants an identity is a member of, by user name or by one of its groups, sorted; every
/// tenant for an admin. These are candidates: the gateway confirms each with the API server
/// (may this identity list jobs in the tenant's namespace?) before it shows anything.
pub fn candidate_tenants(identity: &Identity, tenants: &[GryviaTenant]) -> Vec<String> {
    let mut out: Vec<String> = tenants
        .iter()
        .filter(|t| {
            identity.admin
                || t.spec.members.iter().any(|m| match m.kind {
                    MemberKind::User => m.username == identity.user,
                    MemberKind::Group => identity.groups.contains(&m.username),
                })
        })
        .filter_map(|t| t.metadata.name.clone())
        .filter(|name| identity.tenant.as_ref().is_none_or(|only| only == name))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether a credential limited to a tenant may touch `namespace`: always when it is not
/// limited, otherwise only that tenant's namespace.
pub fn namespace_allowed(identity: &Identity, namespace: &str) -> bool {
    identity
        .tenant
        .as_ref()
        .is_none_or(|t| crate::tenancy::namespace_of(t) == namespace)
}

/// The prefix of every API key.
pub const API_KEY_PREFIX: &str = "gryvia_";

/// An API key as a client presents it: `gryvia_<id>_<secret>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyToken {
    /// The key's id (lowercase letters and digits), which names its record.
    pub id: String,
    /// The secret part, checked against the stored hash.
    pub secret: String,
}

impl ApiKeyToken {
    /// Reads a presented key; `None` when it does not have the shape of one.
    pub fn parse(presented: &str) -> Option<Self> {
        let rest = presented.strip_prefix(API_KEY_PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        let id_ok = (8..=32).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let secret_ok = (32..=128).contains(&secret.len())
            && secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        (id_ok && secret_ok).then(|| Self {
            id: id.to_owned(),
            secret: secret.to_owned(),
        })
    }

    /// The key as a client presents it.
    pub fn format(&self) -> String {
        format!("{API_KEY_PREFIX}{}_{}", self.id, self.secret)
    }
}

/// What the gateway stores of an API key besides its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    /// The key's id.
    pub id: String,
    /// A name people give it.
    pub name: String,
    /// The user the key acts as.
    pub user: String,
    /// The groups the key acts with.
    #[serde(default)]
    pub groups: Vec<String>,
    /// The one tenant the key is limited to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Read-only or read-write.
    pub scope: Scope,
    /// When it was created.
    pub created: jiff::Timestamp,
    /// When it stops working, if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<jiff::Timestamp>,
}

/// Why an API key does not authenticate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Past its expiry.
    #[error("the API key {id} expired at {at}")]
    Expired {
        /// The key's id.
        id: String,
        /// When it expired.
        at: jiff::Timestamp,
    },
}

/// The identity an API key acts as at `now`.
///
/// # Errors
/// [`KeyError::Expired`] when the key is past its expiry.
pub fn identity_from_key(
    record: &ApiKeyRecord,
    mapping: &ClaimMapping,
    now: jiff::Timestamp,
) -> Result<Identity, KeyError> {
    if let Some(at) = record.expires
        && at <= now
    {
        return Err(KeyError::Expired {
            id: record.id.clone(),
            at,
        });
    }
    Ok(Identity {
        user: record.user.clone(),
        groups: record.groups.clone(),
        admin: record
            .groups
            .iter()
            .any(|g| mapping.admin_groups.contains(g)),
        via: Via::ApiKey {
            id: record.id.clone(),
        },
        scope: record.scope,
        tenant: record.tenant.clone(),
    })
}

/// Per-identity request rate limits: a token bucket per key that refills at `per_second` up to
/// `burst`. Time comes in as milliseconds; buckets that have refilled completely are forgotten
/// once more than `max_keys` are held.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    max_keys: usize,
    buckets: HashMap<String, (f64, u64)>,
}

impl RateLimiter {
    /// A limiter of `per_second` sustained requests with bursts of `burst`.
    pub fn new(per_second: f64, burst: u32, max_keys: usize) -> Self {
        Self {
            per_second: per_second.max(f64::MIN_POSITIVE),
            burst: f64::from(burst.max(1)),
            max_keys: max_keys.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Takes one request for `key` at `now_ms`; `Err(ms)` says how long until one is allowed.
    ///
    /// # Errors
    /// The milliseconds to wait when the bucket is empty.
    pub fn check(&mut self, key: &str, now_ms: u64) -> Result<(), u64> {
        if self.buckets.len() >= self.max_keys && !self.buckets.contains_key(key) {
            let (rate, burst) = (self.per_second, self.burst);
            self.buckets.retain(|_, (tokens, at)| {
                let elapsed = now_ms.saturating_sub(*at) as f64 / 1000.0;
                *tokens + elapsed * rate < burst
            });
        }
        let (tokens, at) = self
            .buckets
            .entry(key.to_owned())
            .or_insert((self.burst, now_ms));
        let elapsed = now_ms.saturating_sub(*at) as f64 / 1000.0;
        *tokens = (*tokens + elapsed * self.per_second).min(self.burst);
        *at = (*at).max(now_ms);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - *tokens) / self.per_second * 1000.0;
            Err(wait.ceil() as u64)
        }
    }

    /// How many keys the limiter holds.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::testing::tenant;
    use gryvia_types::{MemberRole, TenantMember};
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn mapping() -> ClaimMapping {
        ClaimMapping {
            admin_groups: vec!["gryvia-admins".into()],
            ..ClaimMapping::default()
        }
    }

    #[test]
    fn claims_give_user_groups_and_admin() {
        let id = identity_from_claims(
            &claims(json!({"email": "a@x", "groups": ["team-a", "gryvia-admins"]})),
            &mapping(),
        )
        .unwrap();
        assert_eq!(id.user, "a@x");
        assert_eq!(id.groups, vec!["team-a", "gryvia-admins"]);
        assert!(id.admin);
        let plain = identity_from_claims(&claims(json!({"email": "b@x"})), &mapping()).unwrap();
        assert!(plain.groups.is_empty() && !plain.admin);
    }

    #[test]
    fn bad_claims_are_refused_with_the_claim_named() {
        let m = mapping();
        assert_eq!(
            identity_from_claims(&claims(json!({"sub": "x"})), &m),
            Err(ClaimError::NoUsername("email".into()))
        );
        assert_eq!(
            identity_from_claims(&claims(json!({"email": ""})), &m),
            Err(ClaimError::NoUsername("email".into()))
        );
        assert_eq!(
            identity_from_claims(&claims(json!({"email": "a", "groups": "g"})), &m),
            Err(ClaimError::BadGroups("groups".into()))
        );
        assert_eq!(
            identity_from_claims(&claims(json!({"email": "a", "groups": [1]})), &m),
            Err(ClaimError::BadGroups("groups".into()))
        );
        assert_eq!(
            identity_from_claims(
                &claims(json!({"email": "a", "groups": ["system:masters"]})),
                &m
            ),
            Err(ClaimError::Reserved("system:masters".into()))
        );
    }

    fn member(kind: MemberKind, name: &str) -> TenantMember {
        TenantMember {
            kind,
            username: name.into(),
            role: MemberRole::Member,
        }
    }

    #[test]
    fn tenants_by_user_or_group_all_for_admins_one_for_a_limited_key() {
        let mut a = tenant("a", 1);
        a.spec.members = vec![member(MemberKind::Group, "team-a")];
        let mut b = tenant("b", 1);
        b.spec.members = vec![member(MemberKind::User, "bob@x")];
        let mut c = tenant("c", 1);
        c.spec.members = vec![member(MemberKind::User, "team-a")];
        let all = [c, b, a];
        let mut id = identity_from_claims(
            &claims(json!({"email": "bob@x", "groups": ["team-a"]})),
            &mapping(),
        )
        .unwrap();
        assert_eq!(
            candidate_tenants(&id, &all),
            vec!["a", "b"],
            "a user named like a group is not the group"
        );
        id.tenant = Some("b".into());
        assert_eq!(candidate_tenants(&id, &all), vec!["b"]);
        assert!(namespace_allowed(&id, "tenant-b") && !namespace_allowed(&id, "tenant-a"));
        let admin = Identity {
            admin: true,
            tenant: None,
            ..id
        };
        assert_eq!(candidate_tenants(&admin, &all), vec!["a", "b", "c"]);
        assert!(namespace_allowed(&admin, "anything"));
    }

    #[test]
    fn api_keys_parse_and_format_and_refuse_other_shapes() {
        let t = ApiKeyToken {
            id: "abcd1234".into(),
            secret: "s".repeat(40),
        };
        assert_eq!(ApiKeyToken::parse(&t.format()), Some(t));
        for bad in [
            "",
            "gryvia_",
            "gryvia_abcd1234",
            "gryvia_ABCD1234_ssssssssssssssssssssssssssssssssssss",
            "gryvia_abc_ssssssssssssssssssssssssssssssssssss",
            "gryvia_abcd1234_short",
            "other_abcd1234_ssssssssssssssssssssssssssssssssssss",
            "gryvia_abcd1234_ssssssssssssssssssssssssssssssss sss",
        ] {
            assert_eq!(ApiKeyToken::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_expire_and_carry_scope_and_tenant() {
        let now: jiff::Timestamp = "2026-12-05T12:00:00Z".parse().unwrap();
        let mut r = ApiKeyRecord {
            id: "abcd1234".into(),
            name: "ci".into(),
            user: "alice@x".into(),
            groups: vec!["gryvia-admins".into()],
            tenant: Some("a".into()),
            scope: Scope::Read,
            created: now,
            expires: Some(now + jiff::SignedDuration::from_hours(1)),
        };
        let id = identity_from_key(&r, &mapping(), now).unwrap();
        assert!(id.admin && id.scope == Scope::Read && id.tenant.as_deref() == Some("a"));
        assert!(!id.scope.allows(false) && id.scope.allows(true));
        r.expires = Some(now);
        assert!(matches!(
            identity_from_key(&r, &mapping(), now),
            Err(KeyError::Expired { .. })
        ));
    }

    #[test]
    fn rate_limits_burst_then_refill_per_key() {
        let mut l = RateLimiter::new(10.0, 3, 100);
        for _ in 0..3 {
            assert_eq!(l.check("a", 0), Ok(()));
        }
        assert_eq!(l.check("a", 0), Err(100));
        assert_eq!(
            l.check("b", 0),
            Ok(()),
            "another identity has its own bucket"
        );
        assert_eq!(
            l.check("a", 100),
            Ok(()),
            "one token back after 100 ms at 10/s"
        );
        assert!(l.check("a", 100).is_err());
    }

    #[test]
    fn full_buckets_are_forgotten_when_too_many_keys_are_held() {
        let mut l = RateLimiter::new(1.0, 1, 2);
        l.check("a", 0).unwrap();
        l.check("b", 0).unwrap();
        l.check("c", 10_000).unwrap();
        assert_eq!(l.len(), 1, "a and b refilled completely and were dropped");
        assert!(!l.is_empty());
    }
}

#[cfg(test)]
mod fuzz {
    //! What parses untrusted input here (presented API keys, token claims) never panics, and
    //! what it accepts is well-formed, over many generated inputs.

    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        #[test]
        fn presented_keys_never_panic_and_round_trip_when_accepted(s in ".{0,200}") {
            if let Some(t) = ApiKeyToken::parse(&s) {
                prop_assert_eq!(t.format(), s);
            }
        }

        #[test]
        fn well_formed_keys_always_parse(id in "[a-z0-9]{8,32}", secret in "[A-Za-z0-9_-]{32,128}") {
            let t = ApiKeyToken { id, secret };
            prop_assert_eq!(ApiKeyToken::parse(&t.format()), Some(t));
        }

        #[test]
        fn claims_never_panic_and_identities_are_never_system_users(
            email in json(), groups in json(), extra in json()
        ) {
            let mut claims = Map::new();
            claims.insert("email".to_owned(), email);
            claims.insert("groups".to_owned(), groups);
            claims.insert("extra".to_owned(), extra);
            if let Ok(id) = identity_from_claims(&claims, &ClaimMapping::default()) {
                prop_assert!(!id.user.is_empty());
                prop_assert!(!id.user.starts_with("system:"));
                prop_assert!(id.groups.iter().all(|g| !g.starts_with("system:")));
            }
        }
    }
}
