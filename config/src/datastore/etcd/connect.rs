//! Building the etcd client: endpoints, TLS (a CA, optionally a client certificate)
//! and user/password, as `datastore:` in `tern.yaml` or calico-node's `ETCD_*`
//! variables give them; and saying in plain words why etcd refused us, since tonic's
//! errors ("transport error", "status: Unavailable ...") do not.
//!
//! The client connects lazily, so a node can start while etcd is down. With a user, the
//! token is fetched before every full read ([`Credentials::authenticate`]) rather than
//! at connect time (which would need etcd up), and the client renews it when etcd
//! reports it expired.

use std::path::Path;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::{with_timeout, EtcdError, CONNECT_TIMEOUT, KEEP_ALIVE, REQUEST_TIMEOUT};
use crate::daemon::{Datastore, EtcdAuth, EtcdTls, Password};

/// What [`EtcdStore::connect`](super::EtcdStore::connect) needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Client URLs, all `http://` or all `https://`.
    pub endpoints: Vec<String>,
    /// TLS files; required for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// User and password.
    pub auth: Option<EtcdAuth>,
}

impl EtcdOptions {
    /// Plain endpoints, no TLS, no user.
    pub fn new(endpoints: Vec<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            tls: None,
            auth: None,
        }
    }

    /// With TLS files.
    pub fn with_tls(mut self, tls: EtcdTls) -> EtcdOptions {
        self.tls = Some(tls);
        self
    }

    /// With a user and password.
    pub fn with_auth(mut self, auth: EtcdAuth) -> EtcdOptions {
        self.auth = Some(auth);
        self
    }

    /// The options of an etcd datastore; `None` for other datastores.
    pub fn from_datastore(datastore: &Datastore) -> Option<EtcdOptions> {
        match datastore {
            Datastore::Etcdv3 {
                endpoints,
                tls,
                auth,
            } => Some(EtcdOptions {
                endpoints: endpoints.clone(),
                tls: tls.clone(),
                auth: auth.clone(),
            }),
            _ => None,
        }
    }
}

/// The user and password the store authenticates with.
pub(super) struct Credentials {
    user: String,
    password: Password,
}

impl Credentials {
    /// Gets a token for the client. An etcd without authentication enabled answers
    /// "authentication is not enabled"; the client then goes on without a token, as
    /// etcd's own Go client does.
    pub(super) async fn authenticate(
        &self,
        client: &mut Client,
        label: &str,
    ) -> Result<(), EtcdError> {
        let user = Some((self.user.clone(), self.password.expose().to_string()));
        match with_timeout(label, "authenticate", client.update_user(user)).await {
            Err(EtcdError::Request { cause, .. })
                if detail_text(&cause)
                    .to_lowercase()
                    .contains("authentication is not enabled") =>
            {
                Ok(())
            }
            other => other,
        }
    }
}

/// Builds a client for `options` (the connection is made by the first request) and the
/// credentials to authenticate with.
pub(super) async fn new_client(
    options: &EtcdOptions,
    label: &str,
) -> Result<(Client, Option<Credentials>), EtcdError> {
    let setup = |detail: String| EtcdError::Setup {
        endpoints: label.to_string(),
        detail,
    };
    let mut connect = ConnectOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_keep_alive(KEEP_ALIVE.0, KEEP_ALIVE.1)
        .with_keep_alive_while_idle(true)
        // etcd's simple tokens expire (5 minutes by default) and are lost when etcd
        // restarts: renew and retry instead of failing the request.
        .with_auto_token_refresh(true);
    if let Some(tls) = &options.tls {
        connect = connect.with_tls(tls_options(tls).map_err(setup)?);
    }
    let credentials = match &options.auth {
        None => None,
        Some(auth) => Some(Credentials {
            user: auth.username.clone(),
            password: auth.password.read().map_err(setup)?,
        }),
    };
    match tokio::time::timeout(
        REQUEST_TIMEOUT,
        Client::connect(&options.endpoints, Some(connect)),
    )
    .await
    {
        Ok(Ok(client)) => Ok((client, credentials)),
        Ok(Err(cause)) => Err(EtcdError::Connect {
            endpoints: label.to_string(),
            cause,
        }),
        Err(_) => Err(EtcdError::Timeout {
            endpoints: label.to_string(),
            operation: "connect",
            timeout: REQUEST_TIMEOUT,
        }),
    }
}

/// The client's TLS settings from the PEM files.
fn tls_options(tls: &EtcdTls) -> Result<TlsOptions, String> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
    };
    let mut options =
        TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca, "CA certificate")?));
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            options = options.identity(Identity::from_pem(
                read(cert, "client certificate")?,
                read(key, "client key")?,
            ));
        }
        (None, None) => {}
        _ => return Err("a client certificate and its key go together".into()),
    }
    Ok(options)
}

/// Everything the client said: its text and the causes behind it (tonic's own text is
/// only "transport error"; the cause is in its sources).
fn detail_text(cause: &etcd_client::Error) -> String {
    let mut text = cause.to_string();
    let mut source: Option<&(dyn std::error::Error + 'static)> = match cause {
        etcd_client::Error::TransportError(e) => std::error::Error::source(e),
        etcd_client::Error::GRpcStatus(s) => std::error::Error::source(s),
        _ => None,
    };
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// [`describe`] for a request to `endpoints` (comma separated). Over TLS 1.3 the client
/// finishes its side of the handshake before etcd checks the client certificate, so a
/// refused (or missing) certificate often shows only as the connection closing on the
/// first request; over `https://` that is said as the likely cause.
pub fn describe_at(endpoints: &str, cause: &etcd_client::Error) -> String {
    let text = describe(cause);
    let closed = {
        let t = text.to_lowercase();
        [
            "connection closed",
            "operation was canceled",
            "broken pipe",
            "connection reset",
        ]
        .iter()
        .any(|n| t.contains(n))
    };
    if endpoints.starts_with("https://") && closed {
        return "TLS handshake failed: etcd closed the connection at once; it probably refused the client certificate, or its absence: with --client-cert-auth etcd requires one signed by a CA it trusts (datastore.tls.cert and datastore.tls.key)".into();
    }
    text
}

/// What went wrong, in plain words when it is one of the usual mistakes (wrong CA, no
/// client certificate, wrong password), else the client's own text.
pub fn describe(cause: &etcd_client::Error) -> String {
    let detail = detail_text(cause);
    let text = detail.to_lowercase();
    let has = |needle: &str| text.contains(needle);
    let plain = if has("parsing tls certificate") {
        "cannot use the TLS files: datastore.tls.ca or datastore.tls.cert holds no valid PEM certificate"
    } else if has("private key") && !has("handshake") {
        "cannot use the TLS files: datastore.tls.key holds no valid PEM private key"
    } else if has("unknownissuer") || has("unknown issuer") {
        "TLS handshake failed: certificate signed by an unknown authority (is datastore.tls.ca the CA that signed etcd's certificate?)"
    } else if has("notvalidforname") || has("not valid for name") {
        "TLS handshake failed: etcd's certificate is not valid for the endpoint's host name or address"
    } else if has("expired") && has("certificate") {
        "TLS handshake failed: a certificate has expired"
    } else if has("certificaterequired") || has("certificate required") {
        "TLS handshake failed: etcd requires a client certificate (set datastore.tls.cert and datastore.tls.key)"
    } else if has("badcertificate")
        || has("bad certificate")
        || has("unknownca")
        || has("unknown ca")
    {
        "TLS handshake failed: etcd refused the client certificate, or its absence: etcd requires one signed by a CA it trusts (datastore.tls.cert and datastore.tls.key)"
    } else if has("invalid user id or password") || has("authentication failed") {
        "authentication failed: invalid user name or password"
    } else if has("user name is empty") || has("user name not found") {
        "etcd requires authentication: set datastore.username and a password (ETCD_USERNAME, ETCD_PASSWORD)"
    } else if has("permission denied") {
        "permission denied: the etcd user may not read Calico's keys (/calico/)"
    } else if has("invalidcontenttype") || has("corrupt message") || has("received corrupt message")
    {
        "TLS handshake failed: etcd did not answer with TLS (is the endpoint http://?)"
    } else if has("connection refused") {
        "connection refused"
    } else {
        return detail;
    };
    plain.to_string()
}
