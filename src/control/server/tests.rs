//! The server and the library client together, on whichever transport the platform
//! has (a Unix socket in a temp dir, or a named pipe): this is what runs under Wine.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use super::{Handler, Server};
use crate::control::client::{self, ClientError};
use crate::control::proto::{HealthReply, Request};

struct Canned;

impl Handler for Canned {
    fn handle(
        &self,
        request: Request,
    ) -> Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + '_>> {
        Box::pin(async move {
            match request {
                Request::Health => serde_json::to_value(HealthReply {
                    live: true,
                    ready: true,
                    reason: "ready".into(),
                })
                .map_err(|e| e.to_string()),
                _ => Err("not in this test".into()),
            }
        })
    }
}

/// A socket path of its own for each test, and what must live as long as it.
fn socket(test: &str) -> (PathBuf, Option<tempfile::TempDir>) {
    if cfg!(windows) {
        let name = format!(r"\\.\pipe\tern-test-{}-{test}", std::process::id());
        (PathBuf::from(name), None)
    } else {
        let dir = tempfile::tempdir().unwrap();
        (dir.path().join("tern.sock"), Some(dir))
    }
}

#[test]
fn the_client_gets_answers_and_errors_from_the_server() {
    let (path, _dir) = socket("answers");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async { Server::bind(&path) }).unwrap();
    rt.spawn(server.run(Arc::new(Canned)));
    // Blocking client calls run off the runtime, as the CLI runs them.
    for _ in 0..3 {
        let v = client::request(&path, Request::Health).unwrap();
        assert_eq!(v["ready"], true, "{v}");
    }
    match client::request(&path, Request::Fib) {
        Err(ClientError::Daemon(e)) => assert_eq!(e, "not in this test"),
        other => panic!("{other:?}"),
    }
    // A second daemon on the same name is refused. On Windows that rests on
    // FILE_FLAG_FIRST_PIPE_INSTANCE, which Wine does not enforce, so it is checked on
    // Unix only (and by hand on real Windows).
    if cfg!(unix) {
        let again = rt.block_on(async { Server::bind(&path) });
        assert!(again.is_err());
    }
}

#[test]
fn no_server_means_not_running() {
    let (path, _dir) = socket("none");
    match client::request(&path, Request::Status) {
        Err(e @ ClientError::NotRunning(_)) => {
            assert!(e.to_string().starts_with("tern is not running"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
