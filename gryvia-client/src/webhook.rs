//! Delivery of outbound webhooks (job hooks, budget alerts, invoices): a JSON POST signed with
//! HMAC-SHA256.
//!
//! Headers: `Content-Type: application/json`, `X-Gryvia-Delivery: <id>` (receivers drop
//! duplicates by it; delivery is at least once) and, when the notification names a Secret,
//! `X-Gryvia-Signature: sha256=<hex HMAC of the body>` (the features guide's) and the
//! [Standard Webhooks](https://www.standardwebhooks.com/) headers, so receivers can verify with
//! that ecosystem's libraries: `webhook-id` (the delivery id, the same on every attempt),
//! `webhook-timestamp` (seconds since the epoch, of this attempt) and `webhook-signature:
//! v1,<base64 HMAC-SHA256 of "id.timestamp.body">`. A secret written as `whsec_<base64>` (the
//! Standard Webhooks form) signs the Standard Webhooks header with the bytes it encodes; any
//! other secret signs it with its bytes as they are (a receiver configures
//! `whsec_<base64 of them>`). `X-Gryvia-Signature` is always the HMAC under the secret's bytes as
//! stored.

use std::time::Duration;

use gryvia_reconcile::{Delivery, Notification};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use sha2::Sha256;

use crate::{Error, Result};

/// Time allowed for one delivery when the notification does not say.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The signature header value for `body` under `key`: `sha256=<hex>`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("hmac takes any key length"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The prefix of a secret in the Standard Webhooks form.
pub const STANDARD_SECRET_PREFIX: &str = "whsec_";

/// The key a secret signs the Standard Webhooks header with: the bytes a `whsec_<base64>`
/// secret encodes, any other secret's bytes as they are.
pub fn standard_key(secret: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    std::str::from_utf8(secret)
        .ok()
        .and_then(|s| s.trim().strip_prefix(STANDARD_SECRET_PREFIX))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .unwrap_or_else(|| secret.to_vec())
}

/// The Standard Webhooks signature of `body` sent as message `id` at `timestamp` (seconds since
/// the epoch) under `key` (see [`standard_key`]): `v1,<base64 HMAC-SHA256 of
/// "id.timestamp.body">`.
pub fn sign_standard(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    use base64::Engine as _;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("hmac takes any key length"));
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// Why a delivery's signature does not verify.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A header is not of the form its scheme defines.
    #[error("{header}: {reason}")]
    Malformed {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `webhook-timestamp` is further from now than the tolerance allows (a replay or a
    /// skewed clock).
    #[error("webhook-timestamp: {timestamp} is {off} s from now, beyond the {tolerance} s allowed")]
    Stale {
        /// The header's timestamp.
        timestamp: i64,
        /// Its distance from now, in seconds.
        off: u64,
        /// The tolerance, in seconds.
        tolerance: u64,
    },
    /// No signature matches the body under the secret.
    #[error("{header}: no signature matches the body under the configured secret")]
    Mismatch {
        /// The header.
        header: &'static str,
    },
}

/// How far `webhook-timestamp` may be from the receiver's clock, as the Standard Webhooks
/// reference libraries allow: five minutes.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(300);

/// Verifies an `X-Gryvia-Signature` value (`sha256=<hex>`) of `body` under `secret` (its
/// bytes as stored), comparing in constant time.
///
/// # Errors
/// [`VerifyError::Malformed`] when the value is not `sha256=` and 64 hex digits,
/// [`VerifyError::Mismatch`] when it is not the body's HMAC.
pub fn verify(secret: &[u8], body: &[u8], header: &str) -> std::result::Result<(), VerifyError> {
    const HEADER: &str = "x-gryvia-signature";
    let malformed = |reason: &str| VerifyError::Malformed {
        header: HEADER,
        reason: reason.to_owned(),
    };
    let digest = header
        .trim()
        .strip_prefix("sha256=")
        .ok_or_else(|| malformed("expected sha256=<hex>"))?;
    let digest = hex::decode(digest).map_err(|_| malformed("the digest is not hex"))?;
    if digest.len() != 32 {
        return Err(malformed("the digest is not 32 bytes"));
    }
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("hmac takes any key length"));
    mac.update(body);
    mac.verify_slice(&digest)
        .map_err(|_| VerifyError::Mismatch { header: HEADER })
}

/// Verifies the Standard Webhooks headers of one delivery: `webhook-timestamp` within
/// `tolerance` of `now` (seconds since the epoch), and one of the space-separated `v1,<base64>`
/// signatures of `webhook-signature` matching `id.timestamp.body` under the secret (a
/// `whsec_<base64>` secret means the bytes it encodes, see [`standard_key`]). Signatures of
/// other versions are skipped, as the specification asks; comparisons are constant-time.
///
/// # Errors
/// [`VerifyError::Malformed`] for a timestamp that is not a number or a signature list with
/// no `v1` entry, [`VerifyError::Stale`] outside the tolerance, [`VerifyError::Mismatch`]
/// when no `v1` signature matches.
pub fn verify_standard(
    secret: &[u8],
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> std::result::Result<(), VerifyError> {
    use base64::Engine as _;
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::Malformed {
            header: "webhook-timestamp",
            reason: format!("{timestamp:?} is not seconds since the epoch"),
        })?;
    let off = now.abs_diff(ts);
    if off > tolerance.as_secs() {
        return Err(VerifyError::Stale {
            timestamp: ts,
            off,
            tolerance: tolerance.as_secs(),
        });
    }
    let key = standard_key(secret);
    let candidates: Vec<Vec<u8>> = signatures
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .collect();
    if candidates.is_empty() {
        return Err(VerifyError::Malformed {
            header: "webhook-signature",
            reason: "no v1,<base64> signature".to_owned(),
        });
    }
    let matches = candidates.iter().any(|sig| {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key)
            .unwrap_or_else(|_| unreachable!("hmac takes any key length"));
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body);
        mac.verify_slice(sig).is_ok()
    });
    if matches {
        Ok(())
    } else {
        Err(VerifyError::Mismatch {
            header: "webhook-signature",
        })
    }
}

/// The signature headers of one delivery attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signatures {
    /// `X-Gryvia-Signature`.
    pub gryvia: String,
    /// `webhook-timestamp`.
    pub timestamp: i64,
    /// `webhook-signature`.
    pub standard: String,
}

impl Signatures {
    /// The signatures of `body`, delivery `id`, sent at `timestamp`, with `secret` (its bytes
    /// as stored).
    pub fn of(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Self {
        Signatures {
            gryvia: sign(secret, body),
            timestamp,
            standard: sign_standard(&standard_key(secret), id, timestamp, body),
        }
    }
}

/// POSTs one JSON body; `Ok(status)` for any HTTP answer, `Err` when none came within
/// `timeout`.
///
/// # Errors
/// [`Error::Webhook`] when the URL is malformed, the connection fails or times out.
pub async fn post(
    url: &str,
    id: &str,
    signatures: Option<&Signatures>,
    body: &[u8],
    timeout: Duration,
) -> Result<u16> {
    let fail = |reason: String| Error::Webhook {
        url: url.to_owned(),
        reason,
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| fail(format!("load trust roots: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let mut req = http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-gryvia-delivery", id);
    if let Some(sig) = signatures {
        req = req
            .header("x-gryvia-signature", &sig.gryvia)
            .header("webhook-id", id)
            .header("webhook-timestamp", sig.timestamp)
            .header("webhook-signature", &sig.standard);
    }
    let req = req
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| fail(format!("build request: {e}")))?;
    let resp = tokio::time::timeout(timeout, client.request(req))
        .await
        .map_err(|_| fail(format!("no answer within {timeout:?}")))?
        .map_err(|e| fail(chain(&e)))?;
    let status = resp.status().as_u16();
    // Drain the body so the connection is reusable; its content does not matter.
    let _ = resp.into_body().collect().await;
    Ok(status)
}

/// An error with its sources in one line (hyper's own says only `client error (Connect)`).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The signatures of `body` with the key the notification names, now; `None` when it names
/// none.
async fn signatures(
    client: &kube::Client,
    n: &Notification,
    body: &[u8],
) -> Result<Option<Signatures>> {
    let Some((ns, name, key)) = &n.secret else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get(name).await.map_err(|source| Error::Api {
        operation: format!("read secret {ns}/{name}"),
        source,
    })?;
    let value = secret
        .data
        .and_then(|d| d.get(key).cloned())
        .ok_or_else(|| Error::Webhook {
            url: n.url.clone(),
            reason: format!("secret {ns}/{name} has no key {key:?}"),
        })?;
    let now = jiff::Timestamp::now().as_second();
    Ok(Some(Signatures::of(&value.0, &n.id, now, body)))
}

/// Delivers one notification: signs it, POSTs it and says what came of it (never an error:
/// a failure is in the [`Delivery`]).
pub async fn deliver(client: &kube::Client, n: &Notification) -> Delivery {
    let outcome = async {
        let body = serde_json::to_vec(&n.body).map_err(|source| Error::Serialize {
            what: format!("notification {}", n.id),
            source,
        })?;
        let signatures = signatures(client, n, &body).await?;
        let timeout = n.timeout_ms.map_or(DELIVERY_TIMEOUT, Duration::from_millis);
        post(&n.url, &n.id, signatures.as_ref(), &body, timeout).await
    }
    .await;
    match outcome {
        Ok(status) => Delivery {
            id: n.id.clone(),
            status: Some(status),
            error: None,
        },
        Err(e) => Delivery {
            id: n.id.clone(),
            status: None,
            error: Some(e.to_string()),
        },
    }
}

/// Delivers notifications one after the other, in order.
pub async fn deliver_each(client: &kube::Client, notifications: &[Notification]) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(notifications.len());
    for n in notifications {
        out.push(deliver(client, n).await);
    }
    out
}

/// The first delivery that did not succeed, as an error naming its URL.
///
/// # Errors
/// [`Error::Webhook`] for that delivery.
pub fn first_failure(notifications: &[Notification], deliveries: &[Delivery]) -> Result<()> {
    for (n, d) in notifications.iter().zip(deliveries) {
        if let Some(reason) = d.failure() {
            return Err(Error::Webhook {
                url: n.url.clone(),
                reason,
            });
        }
    }
    Ok(())
}

/// The first e-mail that was not sent, as an error naming its recipients.
///
/// # Errors
/// [`Error::Mail`] for that e-mail.
pub fn first_mail_failure(
    emails: &[gryvia_reconcile::Email],
    deliveries: &[Delivery],
) -> Result<()> {
    for (m, d) in emails.iter().zip(deliveries) {
        if let Some(reason) = d.failure() {
            return Err(Error::Mail {
                to: m.to.join(", "),
                reason,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hex_hmac_sha256() {
        // RFC 4231 test case 2.
        let sig = sign(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn standard_webhooks_signatures_match_the_reference_vector() {
        // The vector of the Standard Webhooks reference libraries (checked here with PyPI
        // `standardwebhooks` 1.1.0: `Webhook(secret).sign(id, timestamp, payload)`).
        let secret = b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let s = Signatures::of(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
        assert_eq!(
            s.standard,
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(s.timestamp, 1_614_265_330);
        // The guide's header keeps the secret's bytes as stored.
        assert_eq!(s.gryvia, sign(secret, body));
    }

    #[test]
    fn the_reference_vector_verifies_and_a_changed_byte_or_an_old_timestamp_does_not() {
        let secret = b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = br#"{"test": 2432232314}"#;
        let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let ts = 1_614_265_330;
        let check = |sigs: &str, body: &[u8], now: i64| {
            verify_standard(
                secret,
                id,
                "1614265330",
                sigs,
                body,
                now,
                TIMESTAMP_TOLERANCE,
            )
        };
        assert_eq!(check(sig, body, ts), Ok(()));
        // Several signatures (a rotated secret): any v1 match passes; other versions skipped.
        assert_eq!(
            check(&format!("v1a,xyz v1,AAAA {sig}"), body, ts + 300),
            Ok(())
        );
        assert_eq!(
            check(sig, br#"{"test": 2432232315}"#, ts),
            Err(VerifyError::Mismatch {
                header: "webhook-signature"
            })
        );
        assert!(matches!(
            check(sig, body, ts + 301),
            Err(VerifyError::Stale { off: 301, .. })
        ));
        assert!(matches!(
            check("v2,abc", body, ts),
            Err(VerifyError::Malformed {
                header: "webhook-signature",
                ..
            })
        ));
        assert!(matches!(
            verify_standard(secret, id, "soon", sig, body, ts, TIMESTAMP_TOLERANCE),
            Err(VerifyError::Malformed {
                header: "webhook-timestamp",
                ..
            })
        ));
        // The guide's header, RFC 4231 test case 2.
        let rfc = "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(
            verify(b"Jefe", b"what do ya want for nothing?", rfc),
            Ok(())
        );
        assert_eq!(
            verify(b"Jefe", b"what do ya want for nothing!", rfc),
            Err(VerifyError::Mismatch {
                header: "x-gryvia-signature"
            })
        );
        assert!(verify(b"Jefe", b"", "sha256=5bdc").is_err());
        assert!(verify(b"Jefe", b"", "md5=00").is_err());
    }

    mod fuzz {
        //! Webhook signature verification on untrusted headers and bodies (issue #25):
        //! [`CASES`] inputs per property, no panic, and only the sender's own signature passes.

        use proptest::prelude::*;

        use super::super::*;

        const CASES: u32 = 5_000;

        fn header_text() -> impl Strategy<Value = String> {
            prop_oneof![
                ".{0,80}",
                "(v1,[A-Za-z0-9+/=]{0,50} ?){0,4}",
                "sha256=[0-9a-fA-F]{0,70}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn any_headers_are_answered_and_only_a_sender_signature_passes(
                secret in prop::collection::vec(any::<u8>(), 0..40),
                body in prop::collection::vec(any::<u8>(), 0..200),
                id in ".{0,30}",
                ts in any::<i64>(),
                timestamp in prop_oneof![any::<i64>().prop_map(|t| t.to_string()), ".{0,20}"],
                signature in header_text(),
                now in any::<i64>(),
            ) {
                // Untrusted headers: an answer, never a panic, and no forged pass.
                prop_assert!(verify(&secret, &body, &signature).is_err());
                let forged = verify_standard(&secret, &id, &timestamp, &signature, &body, now, TIMESTAMP_TOLERANCE);
                prop_assert!(forged.is_err());
                // What the sender signs verifies; one changed body byte does not.
                let sent = Signatures::of(&secret, &id, ts, &body);
                prop_assert_eq!(verify(&secret, &body, &sent.gryvia), Ok(()));
                prop_assert_eq!(
                    verify_standard(&secret, &id, &ts.to_string(), &sent.standard, &body, ts, TIMESTAMP_TOLERANCE),
                    Ok(())
                );
                let mut tampered = body.clone();
                tampered.push(b' ');
                prop_assert!(verify(&secret, &tampered, &sent.gryvia).is_err());
                prop_assert!(verify_standard(&secret, &id, &ts.to_string(), &sent.standard, &tampered, ts, TIMESTAMP_TOLERANCE).is_err());
            }
        }
    }

    #[test]
    fn a_secret_not_in_the_standard_form_signs_with_its_own_bytes() {
        use base64::Engine as _;
        assert_eq!(standard_key(b"plain-secret"), b"plain-secret".to_vec());
        let encoded = base64::engine::general_purpose::STANDARD.encode(b"plain-secret");
        assert_eq!(
            standard_key(format!("whsec_{encoded}").as_bytes()),
            b"plain-secret".to_vec()
        );
        // Not base64 after the prefix: the bytes as they are.
        assert_eq!(standard_key(b"whsec_!!"), b"whsec_!!".to_vec());
        let a = sign_standard(b"k", "id", 1, b"{}");
        assert_ne!(
            a,
            sign_standard(b"k", "id", 2, b"{}"),
            "the timestamp is signed"
        );
        assert_ne!(
            a,
            sign_standard(b"k", "other", 1, b"{}"),
            "the id is signed"
        );
        assert_ne!(
            a,
            sign_standard(b"k", "id", 1, b"{ }"),
            "the body is signed"
        );
    }
}
