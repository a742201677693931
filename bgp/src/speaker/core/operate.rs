//! Operator actions on one peer (`tern reset`, `tern disable`, ...): what the core
//! does for each and the one-line answer the operator gets. Sans-IO like the rest of
//! the core: the actions become [`Output`]s the driver carries out.

use std::net::IpAddr;
use std::time::Duration;

use crate::wire::notification::cease_subcode;
use crate::wire::Notification;

use super::super::{peer, PeerAction, SpeakerEvent};
use super::{Control, Output, Speaker};

impl Speaker {
    /// Carries out `action` on peer `ip`; `text` goes into the NOTIFICATION of a reset
    /// or a disable (RFC 9003). Returns what was done (or why nothing was) and the
    /// outputs to carry out.
    pub fn operate(
        &mut self,
        ip: IpAddr,
        action: PeerAction,
        text: &str,
    ) -> (Result<String, String>, Vec<Output>) {
        let r = self.operate_inner(ip, action, text);
        (r, std::mem::take(&mut self.out))
    }

    /// `tern drain` (`on`) and `tern undrain`: every route to every peer carries the
    /// GRACEFUL_SHUTDOWN community (RFC 8326), and LOCAL_PREF 0 towards iBGP peers,
    /// or no longer; the difference goes out at once. Sessions stay up.
    pub fn drain(&mut self, on: bool) -> (String, Vec<Output>) {
        let was = std::mem::replace(&mut self.draining, on);
        let ips: Vec<IpAddr> = self.peers.keys().copied().collect();
        let mut sent = 0;
        for ip in ips {
            let Some(out) = self.peers.get_mut(&ip).and_then(|p| p.out.as_mut()) else {
                continue;
            };
            out.rib.set_graceful_shutdown(on);
            self.reexport(ip);
            sent += 1;
        }
        let text = match (was, on) {
            (true, true) => format!("draining already; the table sent again to {sent} established peers"),
            (false, true) => format!(
                "draining: every route now carries GRACEFUL_SHUTDOWN (65535:0), LOCAL_PREF 0 towards iBGP peers; sent to {sent} established peers. Sessions stay up; `tern undrain` ends it"
            ),
            (_, false) => format!("not draining: routes sent to {sent} established peers without GRACEFUL_SHUTDOWN"),
        };
        (text, std::mem::take(&mut self.out))
    }

    fn operate_inner(
        &mut self,
        ip: IpAddr,
        action: PeerAction,
        text: &str,
    ) -> Result<String, String> {
        let Some(p) = self.peers.get_mut(&ip) else {
            return Err(format!("{ip} is not a configured peer"));
        };
        let up = p.source.is_some();
        match action {
            PeerAction::Reset => {
                if p.disabled {
                    return Err(format!(
                        "{ip} is disabled: `tern enable {ip}` starts its session"
                    ));
                }
                let n = Notification::cease_with_message(cease_subcode::ADMINISTRATIVE_RESET, text);
                self.out
                    .push(Output::Control(ip, Control::Reset(n, Duration::ZERO)));
                Ok(if up {
                    format!("session with {ip} reset: Cease / Administrative Reset sent; its routes go until it is back")
                } else {
                    format!("{ip} was not established: its connection attempt starts again")
                })
            }
            PeerAction::BfdDown => {
                if p.disabled || !up {
                    return Err(format!("{ip} is not established"));
                }
                let n = Notification {
                    code: crate::wire::notification::code::CEASE,
                    subcode: cease_subcode::BFD_DOWN,
                    data: bytes::Bytes::new(),
                };
                self.out
                    .push(Output::Control(ip, Control::Reset(n, Duration::ZERO)));
                Ok(format!("session with {ip} ended: BFD down ({text}); Cease / BFD Down sent, its routes withdrawn"))
            }
            PeerAction::SoftIn => {
                if !up {
                    return Err(format!("{ip} is not established"));
                }
                if !p.route_refresh {
                    return Err(format!(
                        "{ip} did not negotiate route refresh, so it cannot be asked to send its routes again; a hard reset (`tern reset {ip}`) can"
                    ));
                }
                let msgs = p.refresh_requests();
                let n = msgs.len();
                self.out.push(Output::Send(ip, msgs));
                Ok(format!("ROUTE-REFRESH sent to {ip} for {n} families: it sends its routes again, judged by the current import policy"))
            }
            PeerAction::SoftOut => {
                if !up {
                    return Err(format!("{ip} is not established"));
                }
                for f in p.families.clone() {
                    if !p.refreshes.contains(&f) {
                        p.refreshes.push(f);
                    }
                }
                self.flush(ip);
                Ok(format!(
                    "every route for {ip} sent again under the current export policy"
                ))
            }
            PeerAction::Disable => {
                if p.disabled {
                    return Ok(format!("{ip} is disabled already"));
                }
                p.disabled = true;
                p.clear_session();
                let address = p.cfg.address;
                self.out.push(Output::DropSession(ip, text.to_string()));
                let changes = self.rib.peer_down(ip);
                self.propagate(changes);
                let why = format!("disabled by the operator: {text}");
                self.event(SpeakerEvent::PeerDown(address, why));
                Ok(format!(
                    "{ip} disabled: session closed with Cease / Administrative Shutdown, its routes withdrawn; it stays down until `tern enable {ip}` (or tern restarts)"
                ))
            }
            PeerAction::Enable => {
                if !p.disabled {
                    return Err(format!("{ip} is not disabled"));
                }
                p.disabled = false;
                let dc = peer::driver_config(&self.cfg, &p.cfg);
                self.out.push(Output::StartSession(Box::new(dc)));
                Ok(format!("{ip} enabled: its session starts"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test: a panic is the test failing

    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Instant;

    use super::super::super::{PeerAction, PeerConfig, SpeakerConfig};
    use super::super::{Output, Speaker};

    fn speaker() -> (Speaker, IpAddr) {
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        let cfg = SpeakerConfig {
            router_id: Ipv4Addr::new(198, 51, 100, 10),
            local_as: 64512,
            listen: None,
            extra_listen: Vec::new(),
            cluster_id: None,
            max_paths: 8,
            peers: vec![PeerConfig::new(SocketAddr::new(ip, 179), 65001)],
            restarting: false,
            max_routes: None,
        };
        (Speaker::new(cfg, Instant::now()).0, ip)
    }

    #[test]
    fn disable_closes_and_holds_a_peer_until_enabled() {
        let (mut s, ip) = speaker();
        let other: IpAddr = "198.51.100.99".parse().unwrap();
        let (r, _) = s.operate(other, PeerAction::Reset, "x");
        assert!(r.unwrap_err().contains("not a configured peer"));
        // Not established: nothing to refresh either way; a reset restarts the attempt.
        for a in [PeerAction::SoftIn, PeerAction::SoftOut] {
            assert!(s
                .operate(ip, a, "x")
                .0
                .unwrap_err()
                .contains("not established"));
        }
        let (r, out) = s.operate(ip, PeerAction::Reset, "x");
        assert!(r.unwrap().contains("not established"));
        assert!(matches!(out.as_slice(), [Output::Control(..)]), "{out:?}");
        // Disable: the session is dropped with the operator's text.
        let (r, out) = s.operate(ip, PeerAction::Disable, "rack work");
        assert!(r.unwrap().contains("disabled"));
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::DropSession(a, t) if *a == ip && t == "rack work")),
            "{out:?}"
        );
        assert!(s.peer_stats()[0].disabled);
        assert!(s
            .operate(ip, PeerAction::Disable, "x")
            .0
            .unwrap()
            .contains("already"));
        assert!(s
            .operate(ip, PeerAction::Reset, "x")
            .0
            .unwrap_err()
            .contains("tern enable 198.51.100.1"));
        // Enable: a new session.
        let (r, out) = s.operate(ip, PeerAction::Enable, "x");
        assert!(r.is_ok());
        assert!(
            matches!(out.as_slice(), [Output::StartSession(_)]),
            "{out:?}"
        );
        assert!(!s.peer_stats()[0].disabled);
        assert!(s.operate(ip, PeerAction::Enable, "x").0.is_err());
        // BFD only ends an established session.
        assert!(s
            .operate(ip, PeerAction::BfdDown, "x")
            .0
            .unwrap_err()
            .contains("not established"));
    }
}
