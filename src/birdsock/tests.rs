//! Unit tests of the BIRD sockets: command parsing, the exact reply layouts, Calico's
//! protocol names, and (Unix) the socket driver with a fixed view.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use tern_config::intent::PeerKind;

use super::render::{parse, protocol_name, reply, Command, Select};
use super::{BirdPeer, BirdView, Family};

/// 2026-11-26 17:00:00 UTC.
fn at(secs_after_five: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_712_400 + secs_after_five)
}

fn peer(address: &str, kind: PeerKind, up: bool, state: &str) -> BirdPeer {
    let address: IpAddr = address.parse().unwrap_or_else(|e| panic!("{address}: {e}"));
    BirdPeer {
        address,
        port: 179,
        kind,
        passive: false,
        remote_as: 64512,
        local_as: 64512,
        source: None,
        up,
        state: state.into(),
        since: at(5),
        last_error: None,
        capabilities: Vec::new(),
        rr_client: false,
        received: 0,
        advertised: 0,
    }
}

fn view(peers: Vec<BirdPeer>, in_grace: bool) -> BirdView {
    BirdView {
        router_id: Some("198.51.100.10".parse().unwrap_or_else(|e| panic!("{e}"))),
        started: at(0),
        in_grace,
        not_configured: None,
        peers,
    }
}

fn answer(line: &str, v: &BirdView, family: Family, now: SystemTime) -> String {
    reply(&parse(line), Ok(v), family, now)
}

#[test]
fn commands_parse_as_birds_grammar() {
    assert_eq!(parse("show status"), Command::ShowStatus);
    assert_eq!(parse("  SHOW   Status \r"), Command::ShowStatus);
    assert_eq!(
        parse("show protocols"),
        Command::ShowProtocols {
            all: false,
            only: None
        }
    );
    assert_eq!(
        parse("show protocols all Mesh_198_51_100_12"),
        Command::ShowProtocols {
            all: true,
            only: Some(Select::Name("Mesh_198_51_100_12".into()))
        }
    );
    assert_eq!(
        parse("show protocols \"Mesh_*\""),
        Command::ShowProtocols {
            all: false,
            only: Some(Select::Pattern("Mesh_*".into()))
        }
    );
    for denied in [
        "configure",
        "configure soft \"/etc/bird.conf\"",
        "disable Mesh_198_51_100_12",
        "enable all",
        "restart all",
        "reload in all",
        "down",
        "eval 1+1",
        "debug all all",
        "graceful restart",
    ] {
        assert_eq!(parse(denied), Command::Denied, "{denied}");
    }
    assert_eq!(parse("show route"), Command::Syntax("route".into()));
    assert_eq!(parse("frobnicate"), Command::Syntax("frobnicate".into()));
    assert_eq!(parse("show protocols a b"), Command::Syntax("b".into()));
    assert_eq!(parse("show protocols 1x"), Command::Syntax("1x".into()));
    assert_eq!(parse("exit"), Command::Exit);
    assert_eq!(parse("quit"), Command::Exit);
    assert_eq!(parse(""), Command::Empty);
    assert_eq!(parse("restrict"), Command::Restrict);
}

#[test]
fn protocol_names_follow_confds_templates() {
    let mut p = peer("198.51.100.12", PeerKind::Mesh, true, "Established");
    assert_eq!(protocol_name(&p), "Mesh_198_51_100_12");
    p.port = 1790;
    assert_eq!(
        protocol_name(&p),
        "Mesh_198_51_100_12",
        "mesh names carry no port"
    );
    p.kind = PeerKind::Global;
    assert_eq!(protocol_name(&p), "Global_198_51_100_12_port_1790");
    p.port = 179;
    assert_eq!(protocol_name(&p), "Global_198_51_100_12");
    p.kind = PeerKind::NodeSpecific;
    assert_eq!(protocol_name(&p), "Node_198_51_100_12");
    p.kind = PeerKind::RouteReflector;
    assert_eq!(protocol_name(&p), "Node_198_51_100_12");
    let v6 = peer("2001:db8:100::12", PeerKind::Mesh, true, "Established");
    assert_eq!(protocol_name(&v6), "Mesh_2001_db8_100__12");
}

#[test]
fn show_protocols_is_bird_16s_table_per_family() {
    let mut down = peer("198.51.100.1", PeerKind::Global, false, "Active");
    down.last_error = Some("connection refused".into());
    let mut passive = peer("198.51.100.13", PeerKind::Mesh, false, "Idle");
    passive.passive = true;
    let v = view(
        vec![
            down,
            peer("198.51.100.12", PeerKind::Mesh, true, "Established"),
            passive,
            peer("2001:db8:100::12", PeerKind::Mesh, true, "Established"),
        ],
        false,
    );
    let out = answer("show protocols", &v, Family::V4, at(60));
    assert_eq!(
        out,
        "2002-name     proto    table    state  since       info\n\
         1002-kernel1  Kernel   master   up     17:00:00    \n\
         \x20device1  Device   master   up     17:00:00    \n\
         \x20direct1  Direct   master   up     17:00:00    \n\
         \x20Global_198_51_100_1 BGP      master   start  17:00:05    Active        Error: connection refused\n\
         \x20Mesh_198_51_100_12 BGP      master   up     17:00:05    Established   \n\
         \x20Mesh_198_51_100_13 BGP      master   start  17:00:05    Passive       \n\
         0000 \n"
    );
    let v6 = answer("show protocols", &v, Family::V6, at(60));
    assert!(
        v6.contains(" Mesh_2001_db8_100__12 BGP      master   up  ") && !v6.contains("198_51"),
        "{v6}"
    );
    // A day later the date is shown instead of the time.
    let later = answer("show protocols", &v, Family::V4, at(86_400));
    assert!(later.contains("up     2026-11-26  Established"), "{later}");
}

#[test]
fn show_protocols_selects_by_name_or_pattern() {
    let v = view(
        vec![
            peer("198.51.100.12", PeerKind::Mesh, true, "Established"),
            peer("198.51.100.1", PeerKind::Global, true, "Established"),
        ],
        false,
    );
    let one = answer("show protocols Global_198_51_100_1", &v, Family::V4, at(9));
    assert_eq!(one.lines().count(), 3, "{one}");
    assert!(one.contains("1002-Global_198_51_100_1 BGP"), "{one}");
    let mesh = answer("show protocols \"Mesh_*\"", &v, Family::V4, at(9));
    assert!(
        mesh.contains("1002-Mesh_198_51_100_12 ") && !mesh.contains("Global"),
        "{mesh}"
    );
    assert_eq!(
        answer("show protocols Nope", &v, Family::V4, at(9)),
        "9002 Nope is not a protocol\n"
    );
    assert_eq!(
        answer("show protocols \"X*\"", &v, Family::V4, at(9)),
        "8003 No protocols match\n"
    );
}

#[test]
fn show_protocols_all_adds_the_details() {
    let mut p = peer("198.51.100.1", PeerKind::Global, true, "Established");
    p.remote_as = 65001;
    p.source = Some("198.51.100.10".parse().unwrap_or_else(|e| panic!("{e}")));
    p.received = 3;
    p.advertised = 2;
    p.capabilities = vec![
        "multiprotocol".into(),
        "4-octet-as".into(),
        "route-refresh".into(),
    ];
    let v = view(vec![p], false);
    let out = answer(
        "show protocols all Global_198_51_100_1",
        &v,
        Family::V4,
        at(9),
    );
    assert_eq!(
        out,
        "2002-name     proto    table    state  since       info\n\
         1002-Global_198_51_100_1 BGP      master   up     17:00:05    Established   \n\
         1006-  Description:    Connection to BGP peer\n\
         \x20  Preference:     100\n\
         \x20  Input filter:   calico_import_from_bgp_peers\n\
         \x20  Output filter:  calico_export_to_bgp_peers\n\
         \x20  Routes:         3 imported, 2 exported, 3 preferred\n\
         \x20  BGP state:          Established\n\
         \x20    Neighbor address: 198.51.100.1\n\
         \x20    Neighbor AS:      65001\n\
         \x20    Neighbor caps:    AS4 refresh\n\
         \x20    Session:          external multihop AS4\n\
         \x20    Source address:   198.51.100.10\n\
         \x20\n\
         0000 \n"
    );
}

#[test]
fn show_status_reports_graceful_restart_while_tern_recovers() {
    let v = view(
        vec![
            peer("198.51.100.12", PeerKind::Mesh, true, "Established"),
            peer("2001:db8:100::12", PeerKind::Mesh, false, "Connect"),
        ],
        true,
    );
    assert_eq!(
        answer("show status", &v, Family::V4, at(10)),
        "1000-BIRD 1.6.8\n\
         1011-Router ID is 198.51.100.10\n\
         \x20Current server time is 2026-11-26 17:00:10\n\
         \x20Last reboot on 2026-11-26 17:00:00\n\
         \x20Last reconfiguration on 2026-11-26 17:00:00\n\
         0024-Graceful restart recovery in progress\n\
         \x20  Waiting for 1 protocols to recover\n\
         \x20  Wait timer is 20/30\n\
         0013 Daemon is up and running\n"
    );
    let done = view(v.peers.clone(), false);
    let out = answer("show status", &done, Family::V4, at(40));
    assert!(
        !out.contains("0024") && out.ends_with("0013 Daemon is up and running\n"),
        "{out}"
    );
}

#[test]
fn before_a_configuration_the_table_is_an_error_not_an_empty_list() {
    let mut v = view(Vec::new(), true);
    v.router_id = None;
    v.not_configured = Some("cluster.yaml: no Node named node-a".into());
    assert_eq!(
        answer("show protocols", &v, Family::V4, at(1)),
        "8002 tern has no valid configuration yet: cluster.yaml: no Node named node-a\n"
    );
    let status = answer("show status", &v, Family::V4, at(1));
    assert!(
        status.starts_with("1000-BIRD 1.6.8\n1011-Router ID is 0.0.0.0\n"),
        "{status}"
    );
    assert!(
        status.ends_with("0013 Reconfiguration in progress\n"),
        "{status}"
    );
}

#[test]
fn refusals_and_errors_use_birds_codes() {
    let v = view(Vec::new(), false);
    assert_eq!(
        answer("configure", &v, Family::V4, at(1)),
        "8007 Access denied\n"
    );
    assert_eq!(
        answer("restrict", &v, Family::V4, at(1)),
        "0016 Access restricted\n"
    );
    assert_eq!(
        answer("show route", &v, Family::V4, at(1)),
        "9001 syntax error, unexpected route\n"
    );
    assert_eq!(
        reply(
            &Command::ShowStatus,
            Err("the daemon's state is poisoned"),
            Family::V4,
            at(1)
        ),
        "8002 the daemon's state is poisoned\n"
    );
    // A peer's error text cannot break the line protocol.
    let mut p = peer("198.51.100.1", PeerKind::Global, false, "Active");
    p.last_error = Some("bad\nline".into());
    let out = answer("show protocols", &view(vec![p], false), Family::V4, at(1));
    assert!(out.contains("Error: bad line\n"), "{out}");
}

#[cfg(unix)]
mod socket {
    //! The driver on a real socket in a temporary directory, with a fixed view.
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::pin::Pin;
    use std::sync::Arc;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::UnixStream;

    use crate::birdsock::server;
    use crate::birdsock::ViewSource;

    struct Fixed(BirdView);

    impl ViewSource for Fixed {
        fn view(
            &self,
            _counts: bool,
        ) -> Pin<Box<dyn std::future::Future<Output = Result<BirdView, String>> + Send + '_>>
        {
            let v = self.0.clone();
            Box::pin(async move { Ok(v) })
        }
    }

    fn fixed() -> Arc<dyn ViewSource> {
        Arc::new(Fixed(view(
            vec![peer("198.51.100.12", PeerKind::Mesh, true, "Established")],
            false,
        )))
    }

    /// Reads reply lines up to and including the one with a final code.
    async fn read_reply(r: &mut BufReader<UnixStream>) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            let n = tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut l))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "EOF after {lines:?}");
            let last = l.as_bytes().get(4) == Some(&b' ') && l.as_bytes()[0].is_ascii_digit();
            lines.push(l.trim_end_matches('\n').to_string());
            if last {
                return lines;
            }
        }
    }

    #[tokio::test]
    async fn many_commands_per_client_exit_and_the_file_lifecycle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/bird.ctl");
        // A stale socket file (nobody listening) is replaced.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let sock = server::start(&path, Family::V4, fixed()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        // A second daemon does not take over a live socket.
        let e = server::start(&path, Family::V4, fixed()).unwrap_err();
        assert!(e.contains("bird.ctl is in use"), "{e}");

        let mut r = BufReader::new(UnixStream::connect(&path).await.unwrap());
        assert_eq!(read_reply(&mut r).await, ["0001 BIRD 1.6.8 ready."]);
        r.get_mut()
            .write_all(b"show protocols\nconfigure\nshow status\n")
            .await
            .unwrap();
        let table = read_reply(&mut r).await;
        assert_eq!(table.last().map(String::as_str), Some("0000 "));
        assert!(
            table
                .iter()
                .any(|l| l.starts_with(" Mesh_198_51_100_12 BGP")),
            "{table:?}"
        );
        assert_eq!(read_reply(&mut r).await, ["8007 Access denied"]);
        let status = read_reply(&mut r).await;
        assert_eq!(
            status.last().map(String::as_str),
            Some("0013 Daemon is up and running")
        );
        // An over-long line is refused and the connection goes on.
        let long = format!("show {}\nshow status\n", "x".repeat(10_000));
        r.get_mut().write_all(long.as_bytes()).await.unwrap();
        assert_eq!(read_reply(&mut r).await, ["9000 Command too long"]);
        assert_eq!(read_reply(&mut r).await[0], "1000-BIRD 1.6.8");
        r.get_mut().write_all(b"exit\n").await.unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{rest:?}");

        drop(sock);
        assert!(!path.exists(), "the socket file is removed at stop");
    }

    #[tokio::test]
    async fn a_client_that_never_reads_does_not_block_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bird.ctl");
        let _sock = server::start(&path, Family::V4, fixed()).unwrap();
        // Floods commands and never reads: its task blocks on its own write.
        let mut hog = UnixStream::connect(&path).await.unwrap();
        let flood = "show protocols all\n".repeat(20_000);
        let writer = tokio::spawn(async move {
            let _ = hog.write_all(flood.as_bytes()).await;
            hog
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut r = BufReader::new(UnixStream::connect(&path).await.unwrap());
        read_reply(&mut r).await;
        r.get_mut().write_all(b"show status\n").await.unwrap();
        assert_eq!(read_reply(&mut r).await[0], "1000-BIRD 1.6.8");
        writer.abort();
    }

    #[tokio::test]
    async fn clients_beyond_the_limit_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bird.ctl");
        let _sock = server::start(&path, Family::V4, fixed()).unwrap();
        let mut held = Vec::new();
        for _ in 0..server::MAX_CLIENTS {
            let mut r = BufReader::new(UnixStream::connect(&path).await.unwrap());
            read_reply(&mut r).await;
            held.push(r);
        }
        let mut extra = UnixStream::connect(&path).await.unwrap();
        let mut got = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0, "{}", String::from_utf8_lossy(&got));
        // A slot frees when a client leaves.
        drop(held.pop());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut r = BufReader::new(UnixStream::connect(&path).await.unwrap());
        assert_eq!(read_reply(&mut r).await, ["0001 BIRD 1.6.8 ready."]);
    }
}

#[test]
fn details_show_the_last_error_only_while_down() {
    let mut p = peer("198.51.100.1", PeerKind::Global, false, "Connect");
    p.last_error = Some("connection refused".into());
    let down = answer(
        "show protocols all",
        &view(vec![p.clone()], false),
        Family::V4,
        at(9),
    );
    assert!(
        down.contains("\n     Last error:       connection refused\n"),
        "{down}"
    );
    assert!(
        down.contains("\n   BGP state:          Connect\n"),
        "{down}"
    );
    assert!(!down.contains("Session:"), "{down}");
    p.up = true;
    p.state = "Established".into();
    let up = answer(
        "show protocols all",
        &view(vec![p], false),
        Family::V4,
        at(9),
    );
    assert!(
        !up.contains("Last error") && up.contains("Session:"),
        "{up}"
    );
}
