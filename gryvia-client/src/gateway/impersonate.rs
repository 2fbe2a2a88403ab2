//! A Kubernetes client that acts as someone else: every request it sends carries
//! `Impersonate-User` and one `Impersonate-Group` per group, on top of the gateway's own
//! connection (one connection pool for every identity). The API server then authorizes the
//! request as that user, so RBAC stays the one judge of what a gateway user may do.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderName, HeaderValue, Request, Response};
use kube::client::Body;

const USER: HeaderName = HeaderName::from_static("impersonate-user");
const GROUP: HeaderName = HeaderName::from_static("impersonate-group");

/// Who to act as, checked to be sendable as headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonation {
    user: HeaderValue,
    groups: Vec<HeaderValue>,
}

impl Impersonation {
    /// The headers for `user` and `groups`.
    ///
    /// # Errors
    /// A reason naming the value when a name cannot be sent as an HTTP header (control
    /// characters).
    pub fn new(user: &str, groups: &[String]) -> Result<Self, String> {
        let value = |v: &str| {
            HeaderValue::from_str(v).map_err(|_| format!("{v:?} cannot be sent as a header value"))
        };
        Ok(Self {
            user: value(user)?,
            groups: groups.iter().map(|g| value(g)).collect::<Result<_, _>>()?,
        })
    }

    /// A client that sends every request of `base` as this identity.
    pub fn client(&self, base: &kube::Client) -> kube::Client {
        kube::Client::new(
            Impersonating {
                base: base.clone(),
                who: self.clone(),
            },
            base.default_namespace(),
        )
    }
}

#[derive(Clone)]
struct Impersonating {
    base: kube::Client,
    who: Impersonation,
}

impl tower::Service<Request<Body>> for Impersonating {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let headers = req.headers_mut();
        // Whatever asked for another identity is replaced: only this one is sent.
        headers.remove(USER);
        headers.remove(GROUP);
        headers.insert(USER, self.who.user.clone());
        for g in &self.who.groups {
            headers.append(GROUP, g.clone());
        }
        let base = self.base.clone();
        Box::pin(async move { base.send(req).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_be_headers_are_refused() {
        assert!(Impersonation::new("alice@example.com", &["team-a".into()]).is_ok());
        assert!(Impersonation::new("a\nb", &[]).is_err());
        assert!(Impersonation::new("a", &["g\r".into()]).is_err());
    }
}
