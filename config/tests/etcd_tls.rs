//! The etcd store against a real etcd (Debian `etcd-server`) that speaks only TLS and
//! demands client certificates, as production etcd clusters run: a snapshot read with a
//! client certificate; a wrong CA, a missing client certificate and a wrong password
//! each fail with a plain sentence naming the endpoint; user/password auth enabled
//! through the client's auth API (no etcdctl).
//!
//! The certificates are made by the test with rcgen: a CA, a server certificate for
//! 127.0.0.1, a client certificate, and a second CA that signed nothing etcd knows.
//! etcd listens on 127.0.0.1 only and is stopped by its PID when the test ends.
//!
//! Without an `etcd` binary the tests print `SKIP` and pass, except under `CI=true`.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

mod common;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, Permission, TlsOptions};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tern_config::daemon::{EtcdAuth, EtcdPassword, EtcdTls, Password};
use tern_config::datastore::etcd::{EtcdOptions, EtcdStore};
use tokio::time::timeout;

use common::{Etcd, ServerTls};

/// How long any single wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(20);
const BGP_KEY: &str = "/calico/resources/v3/projectcalico.org/bgpconfigurations/default";
const BGP_VALUE: &str = r#"{"apiVersion":"projectcalico.org/v3","kind":"BGPConfiguration","metadata":{"name":"default"},"spec":{"asNumber":64512}}"#;

// --- certificates ---------------------------------------------------------------------

/// PEM files in a temp dir: the CA etcd trusts, etcd's server pair, a client pair, and
/// an unrelated CA.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let (ca_params, ca_key) = ca("tern test CA");
        let ca_pem = ca_params.self_signed(&ca_key).expect("self-sign CA").pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf = |cn: &str, sans: Vec<String>| {
            let mut params = CertificateParams::new(sans).expect("params");
            params.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &issuer).expect("sign");
            (cert.pem(), key.serialize_pem())
        };
        let (server, server_key) = leaf("etcd", vec!["127.0.0.1".into(), "localhost".into()]);
        let (client, client_key) = leaf("tern-client", vec![]);
        let (other_params, other_key) = ca("some other CA");
        let other_pem = other_params.self_signed(&other_key).expect("sign").pem();
        let pki = Pki { dir };
        for (name, text) in [
            ("ca.pem", ca_pem),
            ("server.pem", server),
            ("server-key.pem", server_key),
            ("client.pem", client),
            ("client-key.pem", client_key),
            ("other-ca.pem", other_pem),
        ] {
            std::fs::write(pki.path(name), text).expect("write PEM");
        }
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read PEM")
    }

    /// TLS settings as tern takes them: `ca` and optionally the client pair.
    fn tls(&self, ca: &str, client: bool) -> EtcdTls {
        EtcdTls {
            ca: self.path(ca),
            cert: client.then(|| self.path("client.pem")),
            key: client.then(|| self.path("client-key.pem")),
        }
    }

    /// etcd-client options for the test's own admin client.
    fn client_tls(&self) -> TlsOptions {
        TlsOptions::new()
            .ca_certificate(Certificate::from_pem(self.read("ca.pem")))
            .identity(Identity::from_pem(
                self.read("client.pem"),
                self.read("client-key.pem"),
            ))
    }
}

fn ca(cn: &str) -> (CertificateParams, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    (params, KeyPair::generate().expect("key"))
}

// --- etcd process -----------------------------------------------------------------------

/// An etcd with TLS and client-certificate auth on 127.0.0.1; killed by PID on drop.
async fn start_etcd(pki: &Pki) -> Option<Etcd> {
    let tls = ServerTls {
        ca: pki.path("ca.pem"),
        cert: pki.path("server.pem"),
        key: pki.path("server-key.pem"),
    };
    let probe = ConnectOptions::new().with_tls(pki.client_tls());
    Etcd::start("etcd_tls", Some(tls), Some(probe)).await
}

/// The test's own client (client certificate, optionally a user).
async fn admin(
    etcd: &Etcd,
    pki: &Pki,
    user: Option<(&str, &str)>,
) -> Result<Client, etcd_client::Error> {
    let mut options = ConnectOptions::new().with_tls(pki.client_tls());
    if let Some((name, password)) = user {
        options = options.with_user(name, password);
    }
    etcd.connect(Some(options)).await
}

// --- helpers ----------------------------------------------------------------------------

/// One snapshot through tern's store: the keys it holds, or the error text.
async fn snapshot(options: EtcdOptions) -> Result<Vec<String>, String> {
    let work = async {
        let mut store = EtcdStore::connect(&options)
            .await
            .map_err(|e| e.to_string())?;
        store
            .snapshot()
            .await
            .map(|(documents, _)| documents.into_iter().map(|d| d.origin).collect())
            .map_err(|e| e.to_string())
    };
    timeout(WAIT, work).await.expect("an answer in time")
}

async fn put_calico_key(etcd: &Etcd, pki: &Pki) {
    let mut admin = admin(etcd, pki, None).await.expect("admin client");
    admin.put(BGP_KEY, BGP_VALUE, None).await.expect("put");
}

fn expect_error(result: Result<Vec<String>, String>, what: &str) -> String {
    match result {
        Ok(keys) => panic!("{what}: read succeeded: {keys:?}"),
        Err(e) => {
            eprintln!("{what}: {e}");
            e
        }
    }
}

// --- tests ------------------------------------------------------------------------------

#[tokio::test]
async fn snapshot_over_tls_with_a_client_certificate() {
    let pki = Pki::new();
    let Some(etcd) = start_etcd(&pki).await else {
        return;
    };
    put_calico_key(&etcd, &pki).await;
    let options = EtcdOptions::new(vec![etcd.endpoint()]).with_tls(pki.tls("ca.pem", true));
    let keys = snapshot(options)
        .await
        .unwrap_or_else(|e| panic!("{e}\netcd log:\n{}", etcd.log()));
    assert_eq!(keys, vec![BGP_KEY.to_string()]);
}

#[tokio::test]
async fn a_wrong_ca_fails_in_plain_words() {
    let pki = Pki::new();
    let Some(etcd) = start_etcd(&pki).await else {
        return;
    };
    let options = EtcdOptions::new(vec![etcd.endpoint()]).with_tls(pki.tls("other-ca.pem", true));
    let e = expect_error(snapshot(options).await, "wrong CA");
    assert!(e.contains(&etcd.endpoint()), "{e}");
    assert!(
        e.contains("TLS handshake failed: certificate signed by an unknown authority"),
        "{e}"
    );
}

#[tokio::test]
async fn no_client_certificate_is_refused() {
    let pki = Pki::new();
    let Some(etcd) = start_etcd(&pki).await else {
        return;
    };
    let options = EtcdOptions::new(vec![etcd.endpoint()]).with_tls(pki.tls("ca.pem", false));
    let e = expect_error(snapshot(options).await, "no client certificate");
    assert!(e.contains(&etcd.endpoint()), "{e}");
    assert!(e.contains("TLS handshake failed"), "{e}");
    assert!(e.contains("client certificate"), "{e}");
}

#[tokio::test]
async fn user_and_password_work_and_a_wrong_password_is_named() {
    let pki = Pki::new();
    let Some(etcd) = start_etcd(&pki).await else {
        return;
    };
    put_calico_key(&etcd, &pki).await;
    {
        // etcd wants a root user with the root role before auth can be enabled; tern's
        // user may read Calico's keys and nothing else.
        let mut admin = admin(&etcd, &pki, None).await.expect("admin client");
        admin.user_add("root", "root-pw", None).await.expect("root");
        admin
            .user_grant_role("root", "root")
            .await
            .expect("root role");
        admin.role_add("calico-reader").await.expect("role");
        admin
            .role_grant_permission("calico-reader", Permission::read("/calico/").with_prefix())
            .await
            .expect("grant");
        admin.user_add("tern", "s3cret", None).await.expect("user");
        admin
            .user_grant_role("tern", "calico-reader")
            .await
            .expect("grant role");
        admin.auth_enable().await.expect("auth enable");
    }
    let with_password = |password: &str| {
        EtcdOptions::new(vec![etcd.endpoint()])
            .with_tls(pki.tls("ca.pem", true))
            .with_auth(EtcdAuth {
                username: "tern".into(),
                password: EtcdPassword::Value(Password::new(password)),
            })
    };
    let keys = snapshot(with_password("s3cret"))
        .await
        .unwrap_or_else(|e| panic!("{e}\netcd log:\n{}", etcd.log()));
    assert_eq!(keys, vec![BGP_KEY.to_string()]);

    let e = expect_error(snapshot(with_password("wrong")).await, "wrong password");
    assert!(e.contains(&etcd.endpoint()), "{e}");
    assert!(
        e.contains("authentication failed: invalid user name or password"),
        "{e}"
    );
    assert!(!e.contains("wrong"), "the password leaked into {e}");

    // The password read from a file (a final newline is not part of it).
    let file = pki.path("etcd-password");
    std::fs::write(&file, "s3cret\n").expect("write password file");
    let options = EtcdOptions::new(vec![etcd.endpoint()])
        .with_tls(pki.tls("ca.pem", true))
        .with_auth(EtcdAuth {
            username: "tern".into(),
            password: EtcdPassword::File(file),
        });
    let keys = snapshot(options).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(keys, vec![BGP_KEY.to_string()]);
}

#[tokio::test]
async fn a_file_that_is_not_a_certificate_is_named() {
    // No etcd needed: the TLS files are turned into the client's settings first.
    let pki = Pki::new();
    std::fs::write(
        pki.path("broken.pem"),
        "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let options =
        EtcdOptions::new(vec!["https://127.0.0.1:9".into()]).with_tls(pki.tls("broken.pem", false));
    let e = expect_error(snapshot(options).await, "broken CA file");
    assert!(e.contains("https://127.0.0.1:9"), "{e}");
    assert!(
        e.contains("cannot use the TLS files: datastore.tls.ca or datastore.tls.cert holds no valid PEM certificate"),
        "{e}"
    );
    let missing = EtcdOptions::new(vec!["https://127.0.0.1:9".into()])
        .with_tls(pki.tls("missing.pem", false));
    let e = expect_error(snapshot(missing).await, "missing CA file");
    assert!(
        e.contains("cannot read the CA certificate") && e.contains("missing.pem"),
        "{e}"
    );
}
