//! The control socket as the CLI meets it: a server with a canned handler, the real
//! binary as client. Checks the socket's permissions (0600 in a 0700 directory), that
//! a client that is not root is refused (and told so, exit 4), that a wrong protocol
//! version is refused, and that a missing daemon gives exit 3 and a clear message.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;

use tern::control::proto::{DaemonInfo, HealthReply, Request, StatusReply};
use tern::control::server::{Handler, Server};

struct Canned;

impl Handler for Canned {
    fn handle(
        &self,
        request: Request,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<serde_json::Value, String>> + Send + '_>>
    {
        Box::pin(async move {
            match request {
                Request::Status => serde_json::to_value(StatusReply {
                    daemon: DaemonInfo {
                        node: "node-a".into(),
                        router_id: "198.51.100.10".into(),
                        asn: 64512,
                        ..DaemonInfo::default()
                    },
                    peers: Vec::new(),
                })
                .map_err(|e| e.to_string()),
                Request::Health => serde_json::to_value(HealthReply {
                    live: true,
                    ready: false,
                    reason: "0 of 1 BGP peers established".into(),
                })
                .map_err(|e| e.to_string()),
                _ => Err("not in this test".into()),
            }
        })
    }
}

fn tern(args: &[&str], socket: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_cli_talks_to_the_socket_and_strangers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("run/tern.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async { Server::bind(&sock) }).unwrap();
    rt.spawn(server.run(Arc::new(Canned)));

    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(&dir.path().join("run")), 0o700);

    let (code, out) = tern(&["status"], &sock);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("tern is running: node node-a, router id 198.51.100.10, AS 64512"),
        "{out}"
    );
    assert!(out.contains("No IPv4 peers found."), "{out}");
    let (code, out) = tern(&["status", "-o", "json"], &sock);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["daemon"]["asn"], 64512);
    let (code, out) = tern(&["health", "--ready"], &sock);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ready: no (0 of 1 BGP peers established)"),
        "{out}"
    );
    assert_eq!(tern(&["health", "--live"], &sock).0, 0);
    let (code, out) = tern(&["fib"], &sock);
    assert_eq!(code, 5, "{out}");
    assert!(out.contains("tern: not in this test"), "{out}");

    // A client of another protocol version.
    {
        use std::io::{BufRead, BufReader, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.write_all(b"{\"version\":99,\"command\":\"status\"}\n")
            .unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert!(
            line.contains("\"ok\":false") && line.contains("protocol version 99"),
            "{line}"
        );
    }

    // A second daemon on the same socket is refused.
    let again = rt.block_on(async { Server::bind(&sock) });
    assert!(again
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
        .contains("another tern is running"));

    // Not root: open the permissions so the connection reaches the credential check.
    if !nix_is_root() {
        tern_interop_skip("control_socket: not root, cannot test a non-root client");
    } else if !Path::new("/usr/bin/setpriv").exists() {
        tern_interop_skip("control_socket: setpriv (util-linux) missing");
    } else {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(
            dir.path().join("run"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_tern"))
            .args(["status", "--socket"])
            .arg(&sock)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(
            err.contains("the control socket is root-only; run with sudo"),
            "{err}"
        );
    }

    let (code, out) = tern(&["status"], &dir.path().join("nothing.sock"));
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("tern is not running: no control socket at"),
        "{out}"
    );
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn tern_interop_skip(reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{reason}");
    }
    eprintln!("SKIP {reason}");
}
