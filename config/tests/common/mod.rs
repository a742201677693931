//! An etcd server for the store's end-to-end tests: started on 127.0.0.1 with free
//! ports and a data dir in a temp dir, plain or TLS with client certificates, ready
//! once it answers a request, and stopped by its PID when dropped.
//!
//! Without an `etcd` binary [`Etcd::start`] prints `SKIP` and returns `None` (a
//! failure under `CI=true`).

// Each test file uses part of this module.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::time::{timeout, Instant};

#[path = "../../../tests/support/skip.rs"]
mod skip;

/// How long etcd may take to answer after it was started.
const READY: Duration = Duration::from_secs(20);

/// The server side of TLS: etcd serves `cert`/`key` and demands client certificates
/// signed by `ca`.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The CA client certificates must chain to.
    pub ca: PathBuf,
    /// etcd's certificate.
    pub cert: PathBuf,
    /// etcd's key.
    pub key: PathBuf,
}

/// An etcd server a test started; killed by PID on drop.
pub struct Etcd {
    binary: PathBuf,
    /// Holds the data dir and the log; removed on drop (after the kill).
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    tls: Option<ServerTls>,
    /// How the readiness probe (and [`Etcd::client`]) connects.
    probe: Option<ConnectOptions>,
    child: Option<Child>,
}

impl Etcd {
    /// Starts etcd for `test`, plain, or with `tls` and a probe client that connects
    /// with `probe` (its client certificate). `None` (after printing why) when etcd is
    /// not installed.
    pub async fn start(
        test: &str,
        tls: Option<ServerTls>,
        probe: Option<ConnectOptions>,
    ) -> Option<Etcd> {
        let Some(binary) = find_etcd() else {
            skip::skip(test, "etcd not installed (apt-get install etcd-server)");
            return None;
        };
        // Free ports can be taken by someone else between the probe and etcd's bind:
        // retry with new ones.
        let mut last_error = String::new();
        for _ in 0..3 {
            let mut etcd = Etcd {
                binary: binary.clone(),
                dir: data_parent(),
                client_port: free_port(),
                peer_port: free_port(),
                tls: tls.clone(),
                probe: probe.clone(),
                child: None,
            };
            etcd.spawn();
            match etcd.wait_ready().await {
                Ok(()) => return Some(etcd),
                Err(e) => last_error = e,
            }
        }
        panic!("etcd did not start: {last_error}");
    }

    fn spawn(&mut self) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("etcd log file");
        let log2 = log.try_clone().expect("etcd log file");
        let mut command = Command::new(&self.binary);
        command
            .arg("--name=tern-test")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=tern-test={peer}"))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=tern-test")
            .arg("--logger=zap");
        if let Some(tls) = &self.tls {
            command
                .arg("--client-cert-auth")
                .arg(format!("--trusted-ca-file={}", tls.ca.display()))
                .arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()));
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
    }

    /// Waits until etcd answers a request.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd exited ({status}); log:\n{}", self.log()));
                }
            }
            let ready = async {
                let mut client = self.connect(self.probe.clone()).await.ok()?;
                client.get("/ready-probe", None).await.ok()
            };
            if let Ok(Some(_)) = timeout(Duration::from_millis(1000), ready).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "etcd not ready after {READY:?}; log:\n{}",
                    self.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the etcd process (by its PID, through the child handle) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data dir and ports.
    pub async fn restart(&mut self) {
        self.spawn();
        if let Err(e) = self.wait_ready().await {
            panic!("etcd did not restart: {e}");
        }
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// A client of the test's own, connected as `options` say.
    pub async fn connect(
        &self,
        options: Option<ConnectOptions>,
    ) -> Result<Client, etcd_client::Error> {
        Client::connect([self.endpoint()], options).await
    }

    /// A client as the readiness probe connects, in time or the test fails.
    pub async fn client(&self) -> Client {
        timeout(READY, self.connect(self.probe.clone()))
            .await
            .expect("connect in time")
            .expect("connect")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// etcd's log so far, for a failure message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

fn find_etcd() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// A temp dir for etcd's data: in /dev/shm when there is one, since etcd fsyncs every
/// write and the tests write a lot.
fn data_parent() -> tempfile::TempDir {
    let builder = tempfile::Builder::new().prefix("tern-etcd-").to_owned();
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = builder.tempdir_in(shm) {
            return dir;
        }
    }
    builder.tempdir().expect("temp dir")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}
