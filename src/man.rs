//! `tern man`: the manual pages, generated from the command line's own definition
//! (clap_mangen) so they never disagree with `--help`. tern(8) gets the sections clap
//! cannot know (files, exit status, environment); every command gets its own page,
//! tern-run(8) and so on, which tern(8)'s command list refers to. Section 8: tern is
//! a daemon installed in /usr/sbin.

use std::io::Write;
use std::path::Path;

use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

/// The manual's section.
const SECTION: &str = "8";

/// Writes tern(8) to standard output, or with `dir` every page into that directory.
pub fn write(cmd: clap::Command, dir: Option<&Path>) -> Result<(), String> {
    // `help` is clap's, not a command of tern: no page for it.
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives subcommands their display names (tern-run), which name their pages.
    cmd.build();
    let Some(dir) = dir else {
        let mut out = std::io::stdout().lock();
        return render_main(&cmd, &mut out)
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot write the manual page: {e}"));
    };
    let main = dir.join(format!("tern.{SECTION}"));
    write_file(&main, |f| render_main(&cmd, f))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    Ok(())
}

/// One page for `cmd` and one for each of its commands (`tern service install`).
fn write_pages(cmd: &clap::Command, dir: &Path) -> Result<(), String> {
    let man = page(cmd.clone());
    let path = dir.join(man.get_filename());
    write_file(&path, |f| man.render(f))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    Ok(())
}

fn write_file(
    path: &Path,
    render: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), String> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    render(&mut f)
        .and_then(|()| f.flush())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A page with tern's title line. No date: a page built twice is the same byte for
/// byte (the Debian package is reproducible).
fn page(cmd: clap::Command) -> Man {
    Man::new(cmd)
        .section(SECTION)
        .date("")
        .manual("System Administration")
        .source(format!("tern {}", env!("CARGO_PKG_VERSION")))
}

/// tern(8): clap's sections, then files, exit status, environment and see also.
fn render_main(cmd: &clap::Command, w: &mut dyn Write) -> std::io::Result<()> {
    page(cmd.clone()).render(w)?;
    let mut r = Roff::default();
    r.control("SH", ["FILES"]);
    for (path, what) in FILES {
        r.control("TP", []).text([bold(*path)]).text([roman(*what)]);
    }
    r.control("SH", ["EXIT STATUS"]);
    r.text([roman(
        "tern run: 0 when stopped by SIGTERM or SIGINT; 1 when the daemon cannot start \
         or stops on its own (control socket, metrics address, kernel FIB, datastore \
         client or BGP port); 2 when tern.yaml is missing, unreadable or invalid \
         (the unit's RestartPreventExitStatus=2: systemd does not restart it in a loop).",
    )]);
    r.control("PP", []);
    r.text([roman(
        "tern check-config: 0 valid (warnings allowed), 1 any error. The commands that \
         ask the daemon (status, peers, routes, fib, diagnose, health, reload): 0 or 1 \
         as each command's page says, 3 the daemon is not running, 4 the control socket \
         refused the caller (not root), 5 any other failure.",
    )]);
    r.control("SH", ["ENVIRONMENT"]);
    for (name, what) in ENVIRONMENT {
        r.control("TP", []).text([bold(*name)]).text([roman(*what)]);
    }
    r.control("SH", ["SEE ALSO"]);
    r.text([roman(
        "systemctl(1), journalctl(1), calicoctl(1); /usr/share/doc/tern/ (README.md, \
         daemon.md, configuration.md and examples/).",
    )]);
    r.to_writer(w)
}

const FILES: &[(&str, &str)] = &[
    (
        "/etc/tern/tern.yaml",
        "The daemon's own settings: node name, datastore, control socket, metrics, FIB, \
         log level, limits. Every field has a default.",
    ),
    (
        "/etc/tern/cluster.yaml",
        "The cluster's Calico resources, for the file datastore.",
    ),
    (
        "/run/tern/tern.sock",
        "The control socket (root only) that the inspection commands use.",
    ),
    (
        "/lib/systemd/system/tern.service",
        "The systemd unit (Type=notify; `systemctl reload tern` re-reads the datastore).",
    ),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "NODENAME, HOSTNAME",
        "This node's Node name when tern.yaml sets no node (calico-node's variables).",
    ),
    (
        "DATASTORE_TYPE, ETCD_ENDPOINTS, ETCD_*, KUBECONFIG, NAMESPACE, CALICO_ROUTER_ID",
        "Settings tern.yaml leaves out, with calico-node's names and meanings.",
    ),
    (
        "TERN_SOCKET",
        "The control socket of the inspection commands (default /run/tern/tern.sock).",
    ),
    (
        "RUST_LOG",
        "The log filter, overriding tern.yaml's log (for example tern=debug,info).",
    ),
];
