//! The OCI image end to end: loads `dist/tern-VERSION-oci.tar` (scripts/release.sh
//! --image-only) into a throw-away podman store, runs it in a lab node's network
//! namespace with only the capabilities the systemd unit grants, a file datastore
//! mounted read-only at /etc/tern and the control socket's directory mounted from
//! the host, and checks that it peers with a BIRD router (Established, through the
//! socket with the host's `tern` CLI), installs BIRD's route in the node's kernel
//! table and advertises its own block. The container is removed by its ID and the
//! image deleted afterwards.
//!
//! Building the image takes minutes, so without the archive (and without
//! `TERN_IMAGE_TEST`) the test skips; that skip is documented in
//! tests/skips-allowed.txt. `./test.sh --release` builds the archive first and sets
//! `TERN_IMAGE_TEST=1`, which turns a missing archive into a failure.
//! `TERN_IMAGE_ARCHIVE` names another archive.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use tern_interop::lab::probe::{sessions_down, tern_cli};
use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};

const TEST: &str = "image_lab";
const TERN: &str = env!("CARGO_BIN_EXE_tern");

const BIRD_CONF: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.18.100.0/24 blackhole; }
protocol bgp node { local as 65001; neighbor 198.51.100.10 as 64512; hold time 9;
  keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import all; export where source = RTS_STATIC; }; }
"#;

const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 65001}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/16, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-a-198-18-4-0-26}
spec: {node: node-a, cidr: 198.18.4.0/26, state: confirmed}
"#;

/// The container's tern.yaml: paths as the image sees them (the datastore file is
/// relative to this file's directory, /etc/tern).
const TERN_YAML: &str = "node: node-a\ndatastore: {type: file, path: cluster.yaml}\ncontrol_socket: /run/tern/tern.sock\nlog: info\n";

/// The archive to load: `TERN_IMAGE_ARCHIVE`, else what scripts/release.sh writes.
fn archive() -> PathBuf {
    std::env::var_os("TERN_IMAGE_ARCHIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("dist")
                .join(format!("tern-{}-oci.tar", env!("CARGO_PKG_VERSION")))
        })
}

/// podman with its own store under target/tmp (vfs: works on any file system and
/// leaves no mounts behind), so the machine's images and containers are not touched.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn new() -> Podman {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image-lab-podman");
        // A crashed earlier run may have left its store: start clean.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Podman { dir }
    }

    fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
            .args(["--events-backend", "file"]);
        // crun refuses hosts with cgroup controllers on both v1 and v2 (the hybrid
        // layout of the build machines); runc runs there and everywhere else.
        if tern_interop::have_program("runc") {
            c.args(["--runtime", "runc"]);
        }
        c
    }

    /// Runs `podman ARGS`; the output, or an error that quotes the command.
    fn run(&self, args: &[&str]) -> Result<Output, String> {
        let out = self
            .command()
            .args(args)
            .output()
            .map_err(|e| format!("podman {}: {e}", args.join(" ")))?;
        if !out.status.success() {
            return Err(format!(
                "podman {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(out)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An image loaded into the throw-away store, deleted on drop.
struct Image<'a> {
    podman: &'a Podman,
    name: String,
}

impl<'a> Image<'a> {
    fn load(podman: &'a Podman, archive: &Path) -> Image<'a> {
        let path = archive.to_string_lossy();
        let out = podman
            .run(&["load", "--input", &path])
            .unwrap_or_else(|e| panic!("{e}"));
        // "Loaded image: localhost/tern:0.1.0" (podman 4: "Loaded image(s): a, b").
        let text = String::from_utf8_lossy(&out.stdout);
        let name = text
            .lines()
            .filter(|l| l.starts_with("Loaded image"))
            .filter_map(|l| l.split_once(": "))
            .flat_map(|(_, names)| names.split(", "))
            .map(|n| n.trim().to_string())
            .next()
            .unwrap_or_else(|| panic!("podman load named no image: {text}"));
        Image { podman, name }
    }
}

impl Drop for Image<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.podman.run(&["rmi", "--force", &self.name]) {
            eprintln!("{TEST}: {e}");
        }
    }
}

/// A running container, stopped and removed by its ID on drop.
struct Container<'a> {
    podman: &'a Podman,
    id: String,
}

impl Container<'_> {
    fn logs(&self) -> String {
        match self.podman.run(&["logs", &self.id]) {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => e,
        }
    }

    fn running(&self) -> bool {
        self.podman
            .run(&["inspect", "--format", "{{.State.Running}}", &self.id])
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        // SIGTERM first (tern leaves its routes and closes the sessions), then remove.
        if let Err(e) = self.podman.run(&["stop", "--time", "10", &self.id]) {
            eprintln!("{TEST}: {e}");
        }
        if let Err(e) = self.podman.run(&["rm", "--force", &self.id]) {
            eprintln!("{TEST}: {e}");
        }
    }
}

/// `--ulimit` values within this machine's hard limits: podman's defaults (raised to
/// its own maximum) are refused where the hard limit is lower.
fn ulimits() -> Vec<String> {
    use nix::sys::resource::{getrlimit, Resource};
    let cap = |r: Resource| getrlimit(r).map_or(4096, |(_, hard)| hard.min(16384));
    let nofile = cap(Resource::RLIMIT_NOFILE);
    let nproc = cap(Resource::RLIMIT_NPROC);
    vec![
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
    ]
}

/// Whether the test can run here; when not, says why (a documented skip).
fn available(archive: &Path) -> bool {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(TEST, &reason);
        return false;
    }
    let required = std::env::var_os("TERN_IMAGE_TEST").is_some_and(|v| !v.is_empty());
    if !archive.is_file() {
        let reason = format!(
            "no image archive at {} (build it with scripts/release.sh --image-only)",
            archive.display()
        );
        assert!(!required, "TERN_IMAGE_TEST is set but there is {reason}");
        tern_interop::skip_or_fail(TEST, &reason);
        return false;
    }
    for p in ["podman", "bird"] {
        if !tern_interop::have_program(p) {
            // Never a documented skip: with the archive there, the tools must be too.
            assert!(!required, "TERN_IMAGE_TEST is set but {p} is not installed");
            tern_interop::skip_or_fail(TEST, &format!("{p} is not installed"));
            return false;
        }
    }
    true
}

/// tern's IPv4 routes in the node's kernel table.
fn routes(ns: &Netns) -> String {
    ns.ip(&["-4", "route", "show", "proto", "201"])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| e.to_string())
}

#[test]
fn the_image_peers_with_bird_and_installs_its_route() {
    let archive = archive();
    if !available(&archive) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let etc = tmp.path().join("etc");
    let run = tmp.path().join("run");
    for d in [&etc, &run] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    // As the systemd unit's RuntimeDirectory: the socket's directory is root's alone.
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(etc.join("tern.yaml"), TERN_YAML).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(etc.join("cluster.yaml"), CLUSTER).unwrap_or_else(|e| panic!("{e}"));

    let node = Netns::create("tim-node").unwrap_or_else(|e| panic!("{e}"));
    let tor = Netns::create("tim-tor").unwrap_or_else(|e| panic!("{e}"));
    node.veth_to("eth0", &tor, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    node.add_addr("eth0", "198.51.100.10/24")
        .unwrap_or_else(|e| panic!("{e}"));
    tor.add_addr("eth0", "198.51.100.1/24")
        .unwrap_or_else(|e| panic!("{e}"));
    let bird = Peer::start(Kind::Bird, &tor, &tmp.path().join("bird"), BIRD_CONF)
        .unwrap_or_else(|e| panic!("{e}"));

    let podman = Podman::new();
    let image = Image::load(&podman, &archive);
    let mut args: Vec<String> = ["run", "--detach", "--network"].map(String::from).into();
    args.push(format!("ns:/run/netns/{}", node.name()));
    args.extend(
        [
            "--cap-drop=all",
            "--cap-add=NET_ADMIN,NET_RAW,NET_BIND_SERVICE",
        ]
        .map(String::from),
    );
    args.push("--volume".into());
    args.push(format!("{}:/etc/tern:ro", etc.display()));
    args.push("--volume".into());
    args.push(format!("{}:/run/tern", run.display()));
    args.extend(ulimits());
    args.push(image.name.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = podman.run(&args).unwrap_or_else(|e| panic!("{e}"));
    let container = Container {
        podman: &podman,
        id: String::from_utf8_lossy(&out.stdout).trim().to_string(),
    };
    assert!(
        !container.id.is_empty(),
        "podman run printed no container ID"
    );

    let socket = run.join("tern.sock");
    let tern = Path::new(TERN);
    let up = wait_for(
        "the BIRD session Established",
        Duration::from_secs(60),
        || sessions_down(tern, &socket).is_none(),
    );
    if up.is_err() {
        panic!(
            "the session did not come up ({}); running: {}\ncontainer log:\n{}\nBIRD:\n{}",
            sessions_down(tern, &socket).unwrap_or_default(),
            container.running(),
            container.logs(),
            bird.log()
        );
    }
    let installed = wait_for(
        "BIRD's route in the kernel",
        Duration::from_secs(30),
        || {
            let r = routes(&node);
            r.contains("198.18.100.0/24 via 198.51.100.1") && r.contains("blackhole 198.18.4.0/26")
        },
    );
    if installed.is_err() {
        panic!(
            "routes not installed:\n{}\ncontainer log:\n{}",
            routes(&node),
            container.logs()
        );
    }
    let advertised = wait_for("node-a's block at BIRD", Duration::from_secs(30), || {
        bird.cli(&["show", "route", "198.18.4.0/26"])
            .is_ok_and(|o| o.contains("198.18.4.0/26"))
    });
    assert!(
        advertised.is_ok(),
        "BIRD did not learn 198.18.4.0/26: {:?}",
        bird.cli(&["show", "route", "all"])
    );
    let (code, status) = tern_cli(tern, &socket, &["status"]);
    assert_eq!(code, 0, "{status}");
    assert!(
        status.contains("node node-a") && status.contains("198.51.100.1"),
        "{status}"
    );
    drop(container);
    drop(image);
}
