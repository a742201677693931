//! Live interop: runs the capture lab (BIRD 2, GoBGP and FRR in network namespaces)
//! and decodes what they send each other right now, with the same checks as the
//! golden fixture. Needs root and the Debian packages `./test.sh` installs; skips with
//! a reason elsewhere, fails under CI=true.

mod common;

#[cfg(target_os = "linux")]
#[test]
fn bird_gobgp_and_frr_messages_decode_live() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("live_peers", &reason);
        return;
    }
    for p in ["bird", "gobgpd", "/usr/lib/frr/bgpd", "tcpdump"] {
        if !tern_interop::have_program(p) {
            tern_interop::skip_or_fail("live_peers", &format!("{p} is not installed"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = tern_interop::capture::capture_fixtures(dir.path(), "tlive-")
        .unwrap_or_else(|e| panic!("{e}"));
    for f in files {
        let bytes = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let (all, _) = common::decode_capture(&bytes, &f.display().to_string());
        common::check_lab_capture(&all);
        common::check_reencoding(&all);
    }
}
