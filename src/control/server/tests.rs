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

/// The pipe's DACL as the kernel object holds it, read back through the pipe handle
/// and rendered as SDDL. Wine keeps object security descriptors in wineserver, so this
/// runs under Wine; what it cannot show is a non-administrator being turned away (Wine
/// runs everything as an administrator), which needs a real Windows host.
#[cfg(windows)]
fn pipe_dacl(server: &Server) -> String {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Foundation::LocalFree;
    use windows_sys::Win32::Security::Authorization::{
        ConvertSecurityDescriptorToStringSecurityDescriptorW, GetSecurityInfo, SDDL_REVISION_1,
        SE_KERNEL_OBJECT,
    };
    use windows_sys::Win32::Security::{DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR};

    let handle = server.first.as_raw_handle();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: the handle is the live pipe owned by `server`; the out-pointers are valid
    // locals, and `sd` (LocalAlloc'd by the call) is freed below.
    let rc = unsafe {
        GetSecurityInfo(
            handle,
            SE_KERNEL_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    assert_eq!(rc, 0, "GetSecurityInfo on the pipe failed: error {rc}");
    let mut text: windows_sys::core::PWSTR = std::ptr::null_mut();
    // SAFETY: `sd` is the descriptor returned above; `text` receives a LocalAlloc'd
    // NUL-terminated string, read and freed below.
    let ok = unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            sd,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &mut text,
            std::ptr::null_mut(),
        )
    };
    assert_ne!(ok, 0, "the pipe's descriptor does not convert to SDDL");
    // SAFETY: `text` is NUL-terminated (the call's contract); both buffers are freed
    // once and not used afterwards.
    let sddl = unsafe {
        let len = (0..).take_while(|&i| *text.add(i) != 0).count();
        let s = String::from_utf16_lossy(std::slice::from_raw_parts(text, len));
        LocalFree(text.cast());
        LocalFree(sd);
        s
    };
    sddl
}

#[cfg(windows)]
#[test]
fn the_pipe_admits_only_system_and_administrators() {
    let (path, _dir) = socket("acl");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async { Server::bind(&path) }).unwrap();
    let sddl = pipe_dacl(&server);
    eprintln!("pipe DACL: {sddl}");
    // Protected (no inherited entries), and exactly two allow entries: SYSTEM and the
    // Administrators group, with generic-all (GA) or its file mapping (FA).
    let rest = sddl
        .strip_prefix("D:P")
        .unwrap_or_else(|| panic!("not a protected DACL: {sddl}"));
    let mut aces: Vec<&str> = rest.split(['(', ')']).filter(|s| !s.is_empty()).collect();
    aces.sort_unstable();
    let ok =
        |ace: &str, sid: &str| ace == format!("A;;GA;;;{sid}") || ace == format!("A;;FA;;;{sid}");
    assert_eq!(aces.len(), 2, "{sddl}");
    assert!(ok(aces[0], "BA") && ok(aces[1], "SY"), "{sddl}");
}

#[test]
fn actions_need_root_and_reading_does_not() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let line = |r: Request| {
        serde_json::to_vec(&crate::control::proto::RequestEnvelope {
            version: crate::control::proto::VERSION,
            request: r,
        })
        .unwrap()
    };
    let action = line(Request::LogLevel {
        level: "debug".into(),
    });
    let user = super::Client {
        uid: Some(1000),
        pid: Some(42),
    };
    let root = super::Client {
        uid: Some(0),
        pid: Some(42),
    };
    let e = rt
        .block_on(super::answer(&Canned, &action, &user))
        .unwrap_err();
    assert!(
        e.starts_with("permission denied")
            && e.contains("log-level debug")
            && e.contains("uid 1000"),
        "{e}"
    );
    // Root gets through to the handler (which has no answer for it here); so does
    // the Windows pipe's client, whom only the pipe's ACL let in.
    for who in [root, super::Client::default()] {
        let e = rt
            .block_on(super::answer(&Canned, &action, &who))
            .unwrap_err();
        assert_eq!(e, "not in this test");
    }
    let read = line(Request::Health);
    assert!(rt.block_on(super::answer(&Canned, &read, &user)).is_ok());
}
