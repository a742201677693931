//! A real etcd (Debian `etcd-server`) inside a test namespace, listening on one lab
//! address, and a small client for it: puts and deletes through etcd's JSON gateway
//! (`/v3/kv/put`, `/v3/kv/deleterange`), sent from a thread that enters the namespace.
//! No etcd client crate and no `etcdctl` needed; the process is stopped by its PID.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::netns::{check_lab_address, Netns};
use crate::process::Daemon;
use crate::{Error, Result};

/// etcd's client port.
pub const CLIENT_PORT: u16 = 2379;

/// An etcd this test started.
#[derive(Debug)]
pub struct Etcd {
    ns: String,
    addr: Ipv4Addr,
    dir: PathBuf,
    daemon: Option<Daemon>,
}

impl Etcd {
    /// Starts etcd in `ns` listening on `addr` (a lab address already on one of the
    /// namespace's interfaces), with its data and log in `dir`; waits until it answers.
    pub fn start(ns: &Netns, addr: Ipv4Addr, dir: &Path) -> Result<Etcd> {
        check_lab_address(&addr.to_string())?;
        std::fs::create_dir_all(dir).map_err(|source| Error::Spawn {
            command: format!("mkdir {}", dir.display()),
            source,
        })?;
        let mut e = Etcd {
            ns: ns.name().to_string(),
            addr,
            dir: dir.to_path_buf(),
            daemon: None,
        };
        e.spawn()?;
        Ok(e)
    }

    /// The URL tern's `datastore.endpoints` takes.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{CLIENT_PORT}", self.addr)
    }

    fn spawn(&mut self) -> Result<()> {
        let client = self.endpoint();
        // Peers only on the namespace's loopback: a single-member cluster.
        let peer = "http://127.0.0.1:2380";
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.ns, "etcd", "--name=lab"]);
        c.arg(format!("--data-dir={}", self.dir.join("data").display()));
        c.arg(format!("--listen-client-urls={client}"));
        c.arg(format!("--advertise-client-urls={client}"));
        c.arg(format!("--listen-peer-urls={peer}"));
        c.arg(format!("--initial-advertise-peer-urls={peer}"));
        c.arg(format!("--initial-cluster=lab={peer}"));
        c.args([
            "--initial-cluster-state=new",
            "--initial-cluster-token=lab",
            "--logger=zap",
        ]);
        self.daemon = Some(Daemon::spawn("etcd", c, &self.dir.join("etcd.log"))?);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // A range read of a key nobody writes: any answer with a header is fine.
            if let Ok(v) = self.call("/v3/kv/range", &serde_json::json!({"key": b64("/ready")})) {
                if v.get("header").is_some() {
                    return Ok(());
                }
            }
            if !self.daemon.as_mut().is_some_and(Daemon::is_running) {
                return Err(Error::Lab(format!("etcd exited:\n{}", self.log_tail())));
            }
            if Instant::now() > deadline {
                return Err(Error::Lab(format!(
                    "etcd not ready in 20 s:\n{}",
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills etcd (SIGKILL, by PID), as a crash or a lost node would.
    pub fn kill(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.kill();
        }
    }

    /// Starts etcd again on the same data and address.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }

    /// Writes `key` = `value`; returns the revision of the write.
    pub fn put(&self, key: &str, value: &str) -> Result<i64> {
        let v = self.call(
            "/v3/kv/put",
            &serde_json::json!({"key": b64(key), "value": b64(value)}),
        )?;
        revision(&v)
    }

    /// Deletes `key`; returns the revision of the delete.
    pub fn delete(&self, key: &str) -> Result<i64> {
        let v = self.call("/v3/kv/deleterange", &serde_json::json!({"key": b64(key)}))?;
        if v["deleted"].as_str().unwrap_or("0") == "0" {
            return Err(Error::Lab(format!("etcd: {key} was not there to delete")));
        }
        revision(&v)
    }

    /// The end of etcd's log.
    pub fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines
            .get(lines.len().saturating_sub(10)..)
            .unwrap_or(&[])
            .join("\n")
    }

    /// One POST to the JSON gateway, from a thread inside the namespace.
    fn call(&self, path: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
        let ns = self.ns.clone();
        let to = SocketAddr::from((self.addr, CLIENT_PORT));
        let body = body.to_string();
        let target = path.to_string();
        let answer = std::thread::spawn(move || -> std::result::Result<String, String> {
            crate::netns::enter_thread(&ns).map_err(|e| e.to_string())?;
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))
                .map_err(|e| format!("connect {to}: {e}"))?;
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            // HTTP/1.0: the answer is not chunked and ends when the server closes.
            let req = format!(
                "POST {target} HTTP/1.0\r\nHost: {to}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
            let mut out = String::new();
            s.read_to_string(&mut out).map_err(|e| e.to_string())?;
            Ok(out)
        })
        .join()
        .map_err(|_| Error::Lab("etcd client thread panicked".into()))?
        .map_err(|e| Error::Lab(format!("etcd {path}: {e}")))?;
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .ok_or_else(|| Error::Lab(format!("etcd: not an HTTP answer: {answer:?}")))?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(Error::Lab(format!("etcd {path}: {head}: {body}")));
        }
        serde_json::from_str(body).map_err(|e| Error::Lab(format!("etcd {path}: {e}: {body}")))
    }
}

fn revision(v: &serde_json::Value) -> Result<i64> {
    // The gateway prints 64-bit numbers as strings.
    v["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| Error::Lab(format!("etcd answer without a revision: {v}")))
}

/// Standard base64 (the gateway's encoding of keys and values).
pub fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}
