//! The session driver with the speaker on this platform: what it refuses and what it
//! reports.

use std::time::Duration;

use crate::speaker::{self, PeerConfig, SpeakerConfig, SpeakerEvent};

/// A peer whose password and ttlSecurity the platform cannot honour (Windows) is
/// refused with a reason that names them, and the other peer still starts; on
/// Linux it starts. Every platform reports why a connect failed.
#[tokio::test]
async fn unsupported_peers_are_refused_and_connect_failures_are_reported() {
    let guarded = PeerConfig {
        password: Some("pw".into()),
        ttl_security: Some(1),
        ..PeerConfig::new("127.0.0.2:1".parse().unwrap(), 64513)
    };
    let plain = PeerConfig {
        connect_retry: Duration::from_secs(1),
        ..PeerConfig::new("127.0.0.1:1".parse().unwrap(), 64513)
    };
    let cfg = SpeakerConfig {
        router_id: "198.51.100.1".parse().unwrap(),
        local_as: 64512,
        listen: None,
        extra_listen: Vec::new(),
        cluster_id: None,
        max_paths: 1,
        peers: vec![guarded, plain],
        restarting: false,
        max_routes: None,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let _c = speaker::spawn(cfg, tx).await.unwrap();
    let (mut refused, mut failed) = (None, None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while failed.is_none() || (cfg!(not(target_os = "linux")) && refused.is_none()) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(SpeakerEvent::PeerDown(p, why))) if p.port() == 1 => {
                if p.ip().to_string() == "127.0.0.2" {
                    refused = Some(why);
                } else {
                    failed = Some(why);
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let failed = failed.unwrap_or_default();
    assert!(failed.contains("connect to 127.0.0.1:1"), "{failed:?}");
    if cfg!(target_os = "linux") {
        assert_eq!(refused, None);
    } else {
        let why = refused.unwrap_or_default();
        assert!(
            why.contains("not supported on this platform")
                && why.contains("TCP-MD5")
                && why.contains("GTSM"),
            "{why:?}"
        );
    }
}
