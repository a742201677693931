//! A small HTTPS client for the stand-in's protocol tests: rustls over a std TcpStream,
//! HTTP/1.0 so that every answer, a watch stream too, ends when the server closes it.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tern_interop::kubeapi::ApiServer;

/// The token the tests' servers accept.
pub const TOKEN: &str = "lab-token-1";

/// One request over HTTPS with HTTP/1.0, so the answer (a watch stream too) ends when the
/// server closes it; returns the status and a reader of the body.
pub fn request(
    s: &ApiServer,
    method: &str,
    path: &str,
    token: &str,
    accept: Option<&str>,
) -> (u16, Reader) {
    request_with_body(s, method, path, token, accept, "")
}

pub type Reader = BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>;

pub fn request_with_body(
    s: &ApiServer,
    method: &str,
    path: &str,
    token: &str,
    accept: Option<&str>,
    body: &str,
) -> (u16, Reader) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(s.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::from(s.addr().ip());
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(s.addr()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let accept = accept.unwrap_or("application/json");
    write!(
        tls,
        "{method} {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nAccept: {accept}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        s.addr(),
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(tls);
    let mut status_line = String::new();
    r.read_line(&mut status_line).unwrap();
    let code = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {status_line:?}"));
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h.trim().is_empty() {
            break;
        }
    }
    (code, r)
}

/// A request with a JSON body; the answer's status and JSON.
pub fn send(s: &ApiServer, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (code, mut r) = request_with_body(s, method, path, TOKEN, None, body);
    let mut text = String::new();
    r.read_to_string(&mut text).unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, v)
}

pub fn get_json(s: &ApiServer, path: &str, accept: Option<&str>) -> (u16, Value) {
    let (code, mut r) = request(s, "GET", path, TOKEN, accept);
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    (code, serde_json::from_str(&body).unwrap())
}

/// The events of a watch until it ends or `until` says stop.
pub fn watch_events(s: &ApiServer, path: &str, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let (code, r) = request(s, "GET", path, TOKEN, None);
    assert_eq!(code, 200, "{path}");
    let mut events = Vec::new();
    for l in r.lines() {
        let Ok(l) = l else { break };
        events.push(serde_json::from_str(&l).unwrap());
        if until(&events) {
            break;
        }
    }
    events
}

pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}
