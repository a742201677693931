//! The files `tern.yaml` points at besides the cluster file: etcd's TLS files and
//! password file, the kubeconfig. Paths written in `tern.yaml` are relative to its
//! directory (as `datastore.path` always was); paths from the environment stay as given,
//! relative to the working directory like any process's. Each must be readable when the
//! configuration is loaded, so a wrong path fails at start, naming the setting and path.

use std::path::{Path, PathBuf};

use super::{DaemonConfig, Datastore, EtcdPassword, Source};
use crate::error::ConfigError;

/// Makes the relative paths that came from `tern.yaml` (or tern's default) relative
/// to `dir`, `tern.yaml`'s directory.
pub(super) fn resolve_relative(cfg: &mut DaemonConfig, dir: &Path) {
    let from_file = |setting: &str| {
        matches!(
            cfg.source(setting),
            Some(Source::File) | Some(Source::Default)
        )
    };
    let fix = |p: &mut PathBuf, yes: bool| {
        if yes && p.is_relative() {
            *p = dir.join(&*p);
        }
    };
    let (ca, cert, key, password, kubeconfig) = (
        from_file("datastore.tls.ca"),
        from_file("datastore.tls.cert"),
        from_file("datastore.tls.key"),
        from_file("datastore.password"),
        from_file("datastore.kubeconfig"),
    );
    fix(&mut cfg.endpoint_status_dir, true);
    match &mut cfg.datastore {
        Datastore::File { path } => fix(path, true),
        Datastore::Etcdv3 { tls, auth, .. } => {
            if let Some(tls) = tls {
                fix(&mut tls.ca, ca);
                if let Some(c) = &mut tls.cert {
                    fix(c, cert);
                }
                if let Some(k) = &mut tls.key {
                    fix(k, key);
                }
            }
            if let Some(EtcdPassword::File(p)) = auth.as_mut().map(|a| &mut a.password) {
                fix(p, password);
            }
        }
        Datastore::Kubernetes {
            kubeconfig: Some(k),
            ..
        } => fix(k, kubeconfig),
        Datastore::Kubernetes { .. } => {}
    }
}

/// Checks that the datastore's TLS, password and kubeconfig files can be read (and the
/// TLS files hold PEM), naming the setting and the path when one cannot.
pub(super) fn check_readable(cfg: &DaemonConfig, file: &str) -> Result<(), ConfigError> {
    let named = |setting: &str| match cfg.source(setting) {
        Some(Source::Env(var)) => format!("{setting} (from {var})"),
        _ => setting.to_string(),
    };
    match &cfg.datastore {
        Datastore::File { .. } => {}
        Datastore::Etcdv3 { tls, auth, .. } => {
            if let Some(tls) = tls {
                pem(&tls.ca, "CA certificate", file, &named("datastore.tls.ca"))?;
                if let Some(c) = &tls.cert {
                    pem(c, "certificate", file, &named("datastore.tls.cert"))?;
                }
                if let Some(k) = &tls.key {
                    pem(k, "private key", file, &named("datastore.tls.key"))?;
                }
            }
            if let Some(auth) = auth {
                if let EtcdPassword::File(_) = &auth.password {
                    auth.password
                        .read()
                        .map_err(|e| ConfigError::field(file, "datastore.password_file", e))?;
                }
            }
        }
        Datastore::Kubernetes { kubeconfig, .. } => {
            if let Some(k) = kubeconfig {
                std::fs::read(k).map_err(|e| {
                    ConfigError::field(
                        file,
                        &named("datastore.kubeconfig"),
                        format!("cannot read the kubeconfig {}: {e}", k.display()),
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Reads `path` and checks it holds a PEM block.
fn pem(path: &Path, what: &str, file: &str, setting: &str) -> Result<(), ConfigError> {
    let text = std::fs::read(path).map_err(|e| {
        ConfigError::field(
            file,
            setting,
            format!("cannot read the {what} {}: {e}", path.display()),
        )
    })?;
    if !text.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(ConfigError::field(
            file,
            setting,
            format!(
                "{} is not PEM (no -----BEGIN line): expected the {what}",
                path.display()
            ),
        ));
    }
    Ok(())
}
