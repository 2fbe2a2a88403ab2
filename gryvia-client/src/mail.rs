//! E-mail through an SMTP server (budget alerts with the `email` action).
//!
//! One message per [`Email`] of a Plan, to all its recipients, plain text, with the
//! `Message-ID` `<id@gryvia.io>` (the delivery id, the same on every attempt, so receivers can
//! drop duplicates). What came of it is a [`Delivery`]: the server's reply code, and on a
//! refusal or no answer why.

use std::time::Duration;

use gryvia_reconcile::{Delivery, Email};
use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::{Error, Result};

/// Time allowed for one message.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// How the connection to the SMTP server is secured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SmtpTls {
    /// Plain text (a relay on the same host or network only).
    None,
    /// Plain text upgraded with STARTTLS (refused when the server does not offer it).
    #[default]
    Starttls,
    /// TLS from the first byte (SMTPS, usually port 465).
    Tls,
}

/// Where and how e-mail is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmtpSettings {
    /// `host:port` of the server.
    pub server: String,
    /// The sender address.
    pub from: String,
    /// Transport security.
    pub tls: SmtpTls,
    /// User name and password, when the server wants them.
    pub credentials: Option<(String, String)>,
}

/// Sends e-mail through one SMTP server.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    server: String,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer")
            .field("server", &self.server)
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

/// `address` as a mailbox, or an error naming `what` and why.
///
/// # Errors
/// [`Error::Invalid`] when it is not an e-mail address.
pub fn mailbox(address: &str, what: &str) -> Result<Mailbox> {
    address.parse::<Mailbox>().map_err(|e| {
        Error::Invalid(format!(
            "{what}: {address:?} is not an e-mail address ({e})"
        ))
    })
}

impl Mailer {
    /// A mailer for `settings` (no connection is made until the first message).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the flag when the server is not `host:port` or the sender is
    /// not an address.
    pub fn new(settings: &SmtpSettings) -> Result<Self> {
        let from = mailbox(&settings.from, "--smtp-from")?;
        let (host, port) = settings
            .server
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "--smtp-server: {:?} is not host:port",
                    settings.server
                ))
            })?;
        let relay = |e: lettre::transport::smtp::Error| {
            Error::Invalid(format!("--smtp-server: {host}: {e}"))
        };
        let builder = match settings.tls {
            SmtpTls::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host),
            SmtpTls::Starttls => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(host).map_err(relay)?
            }
            SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(host).map_err(relay)?,
        };
        let mut builder = builder.port(port).timeout(Some(SEND_TIMEOUT));
        if let Some((user, password)) = &settings.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        Ok(Mailer {
            transport: builder.build(),
            from,
            server: settings.server.clone(),
        })
    }

    /// The message of `email`.
    ///
    /// # Errors
    /// [`Error::Mail`] when a recipient is not an address or the message cannot be built.
    pub fn message(&self, email: &Email) -> Result<Message> {
        let fail = |reason: String| Error::Mail {
            to: email.to.join(", "),
            reason,
        };
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(email.subject.clone())
            .message_id(Some(format!("<{}@gryvia.io>", email.id)))
            .header(ContentType::TEXT_PLAIN);
        for to in &email.to {
            builder = builder.to(to
                .parse::<Mailbox>()
                .map_err(|e| fail(format!("{to:?} is not an e-mail address ({e})")))?);
        }
        builder
            .body(email.text.clone())
            .map_err(|e| fail(e.to_string()))
    }

    /// Sends `email` once and says what came of it (never an error: a failure is in the
    /// [`Delivery`]).
    pub async fn send(&self, email: &Email) -> Delivery {
        let message = match self.message(email) {
            Ok(m) => m,
            Err(e) => {
                return Delivery {
                    id: email.id.clone(),
                    status: None,
                    error: Some(e.to_string()),
                };
            }
        };
        let code = |c: lettre::transport::smtp::response::Code| c.to_string().parse::<u16>().ok();
        match self.transport.send(message).await {
            Ok(response) => Delivery {
                id: email.id.clone(),
                status: code(response.code()),
                error: None,
            },
            Err(e) => Delivery {
                id: email.id.clone(),
                status: e.status().and_then(code),
                error: Some(format!("SMTP server {}: {e}", self.server)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(server: &str, from: &str) -> SmtpSettings {
        SmtpSettings {
            server: server.to_owned(),
            from: from.to_owned(),
            tls: SmtpTls::None,
            credentials: None,
        }
    }

    #[test]
    fn bad_settings_name_the_flag() {
        let e = Mailer::new(&settings("mail.example", "alerts@example.com")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--smtp-server: \"mail.example\" is not host:port"
        );
        let e = Mailer::new(&settings("mail.example:25", "alerts")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--smtp-from: \"alerts\" is not an e-mail address")
        );
    }

    #[test]
    fn a_message_goes_to_every_recipient_with_the_delivery_id() {
        let m = Mailer::new(&settings("127.0.0.1:2525", "Gryvia <alerts@example.com>")).unwrap();
        let email = Email {
            id: "uid.1764547200.75.email".to_owned(),
            to: vec!["a@example.com".to_owned(), "b@example.com".to_owned()],
            subject: "budget".to_owned(),
            text: "75 %".to_owned(),
        };
        let text = String::from_utf8(m.message(&email).unwrap().formatted()).unwrap();
        assert!(
            text.contains("Message-ID: <uid.1764547200.75.email@gryvia.io>"),
            "{text}"
        );
        assert!(text.contains("To: a@example.com, b@example.com"), "{text}");
        assert!(text.contains("From: Gryvia <alerts@example.com>"), "{text}");
        let bad = Email {
            to: vec!["nobody".to_owned()],
            ..email
        };
        assert!(
            m.message(&bad)
                .unwrap_err()
                .to_string()
                .contains("\"nobody\" is not an e-mail address")
        );
    }
}
