//! The control socket as the CLI meets it: a real `Server` with a canned handler, the
//! real binary as client. Checks the text and JSON the CLI prints and its exit codes,
//! the socket's permissions (0600 in a 0700 directory), that a wrong protocol version,
//! bad JSON and an overlong line are refused, that a client that is neither root nor
//! the daemon's user is refused (exit 4), and that a missing daemon gives exit 3.

#![cfg(unix)]
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::{Arc, Mutex};

use tern::control::proto::{DaemonInfo, HealthReply, PeerInfo, PeersReply, Request, StatusReply};
use tern::control::server::{Handler, Limits, Server};

fn peer(address: &str, state: &str, last_error: Option<&str>) -> PeerInfo {
    PeerInfo {
        address: address.into(),
        port: 179,
        asn: 64512,
        local_asn: 64512,
        kind: "node-to-node mesh".into(),
        state: state.into(),
        since: "2024-03-01T08:00:00Z".into(),
        uptime_s: if state == "Established" { 61 } else { 0 },
        families: vec!["ipv4-unicast".into()],
        capabilities: vec!["4-octet-as".into(), "route-refresh".into()],
        prefixes_received: 2,
        prefixes_accepted: 2,
        prefixes_advertised: 1,
        last_error: last_error.map(String::from),
        flaps: 0,
        updates_in: 0,
        updates_out: 0,
        policy_rejected_in: 0,
        policy_filtered_out: 0,
        ..PeerInfo::default()
    }
}

fn canned_status() -> StatusReply {
    StatusReply {
        daemon: DaemonInfo {
            version: "0.1.0".into(),
            pid: 4321,
            node: "node-a".into(),
            router_id: "198.51.100.10".into(),
            asn: 64512,
            started: "2024-03-01T07:59:00Z".into(),
            uptime_s: 125,
            datastore: "file cluster.yaml".into(),
            ..DaemonInfo::default()
        },
        peers: vec![
            peer("198.51.100.11", "Established", None),
            peer("2001:db8::11", "Active", Some("Socket: Connection refused")),
        ],
    }
}

/// Answers status, peers and health; everything else is an error from "the daemon".
struct Canned;

impl Handler for Canned {
    fn handle(
        &self,
        request: Request,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<serde_json::Value, String>> + Send + '_>>
    {
        Box::pin(async move {
            let v = match request {
                Request::Status => serde_json::to_value(canned_status()),
                Request::Peers { .. } => serde_json::to_value(PeersReply {
                    peers: canned_status().peers,
                }),
                Request::Health => serde_json::to_value(HealthReply {
                    live: true,
                    ready: false,
                    reason: "1 of 2 BGP peers established".into(),
                }),
                _ => return Err("not in this test".into()),
            };
            v.map_err(|e| e.to_string())
        })
    }
}

/// A server on `<tempdir>/run/tern.sock`, served by a runtime that lives as long as
/// the returned value.
struct Daemon {
    rt: tokio::runtime::Runtime,
    /// Kept so the directory lives as long as the server.
    _dir: tempfile::TempDir,
    sock: PathBuf,
}

fn daemon() -> Daemon {
    daemon_with(Limits::default())
}

fn daemon_with(limits: Limits) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("run/tern.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(async { Server::bind(&sock) })
        .unwrap()
        .with_limits(limits);
    rt.spawn(server.run(Arc::new(Canned)));
    Daemon {
        rt,
        _dir: dir,
        sock,
    }
}

/// Runs the binary with `--socket`; returns exit code, stdout, stderr.
fn tern(args: &[&str], socket: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sends raw bytes and reads one answer line.
fn raw(sock: &Path, bytes: &[u8]) -> serde_json::Value {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(bytes).unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_cli_prints_status_peers_and_health_with_exit_codes() {
    let d = daemon();
    assert_eq!(mode(&d.sock), 0o600);
    assert_eq!(mode(d.sock.parent().unwrap()), 0o700);

    let (code, out, err) = tern(&["status"], &d.sock);
    assert_eq!(code, 0, "{out}{err}");
    let expected = "\
tern is running: node node-a, router id 198.51.100.10, AS 64512, up 2m 5s (pid 4321)

IPv4 BGP status
+---------------+-------------------+-------+------------+-------------+
| PEER ADDRESS  |     PEER TYPE     | STATE |   SINCE    |    INFO     |
+---------------+-------------------+-------+------------+-------------+
| 198.51.100.11 | node-to-node mesh | up    | 2024-03-01 | Established |
+---------------+-------------------+-------+------------+-------------+

IPv6 BGP status
+--------------+-------------------+-------+------------+-----------------------------------+
| PEER ADDRESS |     PEER TYPE     | STATE |   SINCE    |               INFO                |
+--------------+-------------------+-------+------------+-----------------------------------+
| 2001:db8::11 | node-to-node mesh | start | 2024-03-01 | Active Socket: Connection refused |
+--------------+-------------------+-------+------------+-----------------------------------+
";
    assert_eq!(out, expected);

    let (code, out, err) = tern(&["status", "-o", "json"], &d.sock);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v, serde_json::to_value(canned_status()).unwrap());

    let (code, out, err) = tern(&["peers"], &d.sock);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("198.51.100.11 (node-to-node mesh), AS 64512 (local AS 64512)\n"),
        "{out}"
    );
    assert!(
        out.contains("  prefixes      2 received, 2 accepted, 1 advertised\n"),
        "{out}"
    );
    assert!(
        out.contains("  last error    Socket: Connection refused\n"),
        "{out}"
    );

    // Live but not ready: --ready fails (1), --live passes, no flag asks for both.
    let (code, out, err) = tern(&["health", "--ready"], &d.sock);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "live: yes\nready: no (1 of 2 BGP peers established)\n");
    assert_eq!(tern(&["health", "--live"], &d.sock).0, 0);
    assert_eq!(tern(&["health"], &d.sock).0, 1);
    assert_eq!(tern(&["health", "--live", "-o", "json"], &d.sock).0, 0);

    // An error from the daemon: exit 5, told on stderr.
    let (code, out, err) = tern(&["fib"], &d.sock);
    assert_eq!((code, out.as_str()), (5, ""), "{err}");
    assert_eq!(err, "tern: not in this test\n");
    drop(d);
}

#[test]
fn bad_requests_get_ok_false_and_other_clients_are_not_blocked() {
    let d = daemon();
    // An idle client holds a connection open while others are served.
    let _idle = UnixStream::connect(&d.sock).unwrap();

    let v = raw(&d.sock, b"{\"version\":99,\"command\":\"status\"}\n");
    assert_eq!(v["ok"], false, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("protocol version 99 is not supported"), "{e}");

    let v = raw(&d.sock, b"{\"version\":1,\"command\":\"sta\n");
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("not a valid request"),
        "{v}"
    );

    let v = raw(&d.sock, b"{\"version\":1,\"command\":\"bogus\"}\n");
    assert_eq!(v["ok"], false, "{v}");

    let mut long = vec![b' '; 70 * 1024];
    long.push(b'\n');
    let v = raw(&d.sock, &long);
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("longer than 65536 bytes (limits.control_request_bytes)"),
        "{v}"
    );

    // Several requests on one connection, one answer line each, in order.
    let mut s = UnixStream::connect(&d.sock).unwrap();
    s.write_all(b"{\"version\":1,\"command\":\"health\"}\n{\"version\":1,\"command\":\"peers\",\"address\":null}\n")
        .unwrap();
    let mut lines = BufReader::new(&s).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let second: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["result"]["live"], true, "{first}");
    assert_eq!(
        second["result"]["peers"][0]["address"], "198.51.100.11",
        "{second}"
    );

    assert_eq!(tern(&["status"], &d.sock).0, 0);

    // A second daemon on the same socket is refused; the first keeps its socket.
    let again = d.rt.block_on(async { Server::bind(&d.sock) });
    let e = again.err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        e,
        format!("another tern is running on {}", d.sock.display())
    );
    assert_eq!(tern(&["status"], &d.sock).0, 0);
}

#[test]
fn requests_over_the_rate_and_clients_over_64_are_told_why() {
    let d = daemon_with(Limits {
        requests_per_second: 5,
        ..Limits::default()
    });
    // 100 requests at once on one connection: the burst (twice the rate) is answered,
    // and the refill while they are served (5 a second), the rest are refused with the
    // reason and the setting to change, in order. The refill depends on how long the
    // daemon takes, which a loaded machine stretches: the bound is measured, not fixed.
    let t = std::time::Instant::now();
    let mut s = UnixStream::connect(&d.sock).unwrap();
    s.write_all(&b"{\"version\":1,\"command\":\"health\"}\n".repeat(100))
        .unwrap();
    let mut lines = BufReader::new(s.try_clone().unwrap()).lines();
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..100 {
        let v: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if v["ok"] == true {
            ok += 1;
        } else {
            let e = v["error"].as_str().unwrap_or_default();
            assert_eq!(e, "too many requests: the daemon answers at most 5 per second (limits.control_requests_per_second in tern.yaml); try again shortly");
            refused += 1;
        }
    }
    let most = 10 + (5.0 * t.elapsed().as_secs_f64()).ceil() as usize + 1;
    assert!(
        (10..=most).contains(&ok) && refused > 0,
        "{ok} answered (10 to {most} allowed after {:?}), {refused} refused",
        t.elapsed()
    );
    // The budget refills: a second later requests are answered again.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    s.write_all(b"{\"version\":1,\"command\":\"health\"}\n")
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    drop(lines);
    drop(s);
    std::thread::sleep(std::time::Duration::from_millis(200));

    // 64 idle clients hold every slot; the next one is told the daemon is busy.
    let idle: Vec<UnixStream> = (0..64)
        .map(|_| UnixStream::connect(&d.sock).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let v = raw(&d.sock, b"{\"version\":1,\"command\":\"health\"}\n");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(
        v["error"],
        "busy: 64 clients are connected already; try again shortly"
    );
    drop(idle);
    // A slot frees when a client leaves: as soon as the server has seen them go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (code, out, _) = tern(&["health"], &d.sock);
        if !out.is_empty() && !out.contains("busy") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "exit {code}: no slot freed 20 s after 64 clients left: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_stale_socket_is_replaced_and_the_file_goes_with_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tern.sock");
    // A socket file nobody listens on, as a crashed daemon leaves it.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async { Server::bind(&sock) }).unwrap();
    assert_eq!(mode(&sock), 0o600);
    drop(server);
    assert!(!sock.exists());

    // Not a socket: left alone and refused.
    std::fs::write(&sock, "precious").unwrap();
    let e = rt.block_on(async { Server::bind(&sock) }).err().unwrap();
    assert!(e.to_string().contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "precious");
}

#[test]
fn a_client_that_is_not_root_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root, cannot run a client as another user");
    }
    let switch: Vec<&str> = if Path::new("/usr/bin/setpriv").exists() {
        vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]
    } else if Path::new("/usr/sbin/runuser").exists() || Path::new("/sbin/runuser").exists() {
        vec!["runuser", "-u", "nobody", "--"]
    } else {
        return skip("neither setpriv nor runuser (util-linux) is installed");
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("run/tern.sock");
    let logs = serve_with_logs(&sock);
    // Open the path so the connection reaches the daemon's credential check (the 0700
    // directory and 0600 socket would stop it earlier, with a plain EACCES that the
    // CLI reports the same way).
    for p in [dir.path(), sock.parent().unwrap()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = Command::new(switch[0])
        .args(&switch[1..])
        .arg(env!("CARGO_BIN_EXE_tern"))
        .args(["status", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert_eq!(
        err,
        format!(
            "tern: permission denied on {}: the control socket is root-only; run with sudo\n",
            sock.display()
        )
    );
    assert!(out.stdout.is_empty());
    // The refusal came from the daemon (not from file permissions), which logged who.
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("WARN") && logs.contains("refused") && logs.contains("uid 65534 pid "),
        "{logs}"
    );
}

/// What the server logs, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Serves `sock` on a thread of its own (a current-thread runtime, so the thread's
/// log subscriber sees every connection task) until the test process ends.
fn serve_with_logs(sock: &Path) -> Arc<Mutex<Vec<u8>>> {
    let logs = Logs::default();
    let buffer = Arc::clone(&logs.0);
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let sock = sock.to_path_buf();
    std::thread::spawn(move || {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let server = Server::bind(&sock).unwrap();
            bound_tx.send(()).unwrap();
            server.run(Arc::new(Canned)).await
        });
    });
    bound_rx.recv().unwrap();
    buffer
}

#[test]
fn no_daemon_means_exit_3_and_how_to_start_it() {
    let (code, out, err) = tern(&["status"], Path::new("/nonexistent/x.sock"));
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert_eq!(
        err,
        "tern: tern is not running: no control socket at /nonexistent/x.sock (start it with `systemctl start tern`, or pass --socket)\n"
    );
    // A socket file nobody listens on reads the same.
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("tern.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert_eq!(tern(&["peers", "-o", "json"], &stale).0, 3);
}

fn skip(reason: &str) {
    tern_interop::skip_or_fail("control_socket", reason);
}
