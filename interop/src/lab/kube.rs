//! The lab's Kubernetes API server: the stand-in ([`crate::kubeapi`]) in the switch
//! namespace on [`plan::KUBE_API_V4`], every node's gateway, holding the lab's cluster in
//! KDD shapes ([`super::kdd`]), with one kubeconfig every node's tern reads.
//!
//! It enforces `deploy/kubernetes/rbac.yaml`: a request tern's role does not grant is
//! answered 403, so every lab run also checks that the role is enough.
//!
//! In the calling process (tests change objects, compact, rotate the token, restart it)
//! or as `tern-lab kube-apiserver` in its own process (a lab that outlives `tern-lab
//! up`, stopped by `tern-lab down` by its PID).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::kdd;
use super::plan::{self, LabSpec};
use crate::kubeapi::{ApiServer, ApiServerOptions};
use crate::netns::Netns;
use crate::process::Daemon;
use crate::{Error, Result};

/// The running stand-in.
#[derive(Debug)]
pub enum KubeApi {
    /// Served by this process.
    InProcess(ApiServer),
    /// `tern-lab kube-apiserver`, by PID.
    Process(Daemon),
}

/// The stand-in's listen address.
pub fn listen() -> Result<SocketAddr> {
    let ip: IpAddr = plan::KUBE_API_V4
        .parse()
        .map_err(|e| Error::Lab(format!("{}: {e}", plan::KUBE_API_V4)))?;
    Ok(SocketAddr::new(ip, plan::KUBE_API_PORT))
}

/// The role the lab's API server enforces: what operators deploy.
pub fn rbac_file() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/rbac.yaml")
}

/// The objects the lab's API server holds: the cluster of `spec` in KDD shapes.
pub fn objects(spec: &LabSpec) -> Result<Vec<Value>> {
    kdd::objects(&plan::cluster_yaml(spec), &|f: &str| {
        std::fs::read_to_string(f).ok()
    })
}

/// Starts the stand-in in `switch` with `objects` and writes the nodes' kubeconfig.
pub fn start(
    spec: &LabSpec,
    switch: &Netns,
    objects: Vec<Value>,
    separate_process: bool,
) -> Result<KubeApi> {
    let kubeconfig = spec.kubeconfig();
    if !separate_process {
        let mut opts = ApiServerOptions::new(listen()?, plan::KUBE_TOKEN);
        opts.netns = Some(switch.name().to_string());
        let rbac = rbac_file();
        opts.rbac_yaml = Some(
            std::fs::read_to_string(&rbac)
                .map_err(|e| Error::Lab(format!("{}: {e}", rbac.display())))?,
        );
        let server = ApiServer::start(opts)?;
        for o in objects {
            server.apply(o)?;
        }
        server.write_kubeconfig(&kubeconfig, plan::KUBE_TOKEN)?;
        return Ok(KubeApi::InProcess(server));
    }
    let dir = spec.dir.join("kube-objects");
    std::fs::create_dir_all(&dir).map_err(|e| Error::Lab(format!("{}: {e}", dir.display())))?;
    let list = serde_json::json!({"kind": "List", "apiVersion": "v1", "items": objects});
    let file = dir.join("lab.json");
    std::fs::write(&file, format!("{list:#}\n"))
        .map_err(|e| Error::Lab(format!("{}: {e}", file.display())))?;
    let _ = std::fs::remove_file(&kubeconfig);
    let me = std::env::current_exe().map_err(|e| Error::Lab(format!("tern-lab itself: {e}")))?;
    let mut c = switch.command(&me.to_string_lossy());
    c.arg("kube-apiserver")
        .args(["--listen", &listen()?.to_string()])
        .arg("--fixtures")
        .arg(&dir)
        .args(["--token", plan::KUBE_TOKEN])
        .arg("--rbac")
        .arg(rbac_file())
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    let mut d = Daemon::spawn("kube-apiserver", c, &spec.dir.join("kube-apiserver.log"))?;
    wait_for(&kubeconfig, &mut d)?;
    Ok(KubeApi::Process(d))
}

/// Waits until the stand-in has written the kubeconfig (it does once it serves).
fn wait_for(kubeconfig: &Path, d: &mut Daemon) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if kubeconfig.is_file() {
            return Ok(());
        }
        if !d.is_running() {
            return Err(Error::Lab(
                "tern-lab kube-apiserver exited (see kube-apiserver.log in the lab directory)"
                    .into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::Lab(format!(
        "tern-lab kube-apiserver wrote no {} in 20 s",
        kubeconfig.display()
    )))
}
