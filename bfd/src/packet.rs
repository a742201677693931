//! The BFD control packet (RFC 5880 §4.1): the 24-byte mandatory section, encoded and
//! decoded with the reception checks of §6.8.6 that need no session (version, length,
//! detect multiplier, multipoint bit, discriminators). An authentication section is
//! recognised by its bit and length but not verified: tern configures none, so a
//! packet that carries one is refused by the session (§6.8.6: "A bit set and no
//! authentication in use").

use thiserror::Error;

/// Length of the mandatory section.
pub const LEN: usize = 24;

/// The session state a packet announces (§4.1 `Sta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Administratively held down.
    AdminDown,
    /// Down (and where every session starts).
    Down,
    /// The remote end is heard, not yet confirmed.
    Init,
    /// Both ends hear each other.
    Up,
}

impl State {
    fn from_bits(b: u8) -> State {
        match b & 3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    fn bits(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }

    /// `AdminDown`, `Down`, `Init`, `Up`, as FRR and BIRD print them.
    pub fn name(self) -> &'static str {
        match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        }
    }
}

/// Why the session last left Up (§4.1 `Diag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diag {
    /// No diagnostic.
    None,
    /// Control Detection Time Expired: the peer went silent.
    TimeExpired,
    /// Echo Function Failed.
    EchoFailed,
    /// Neighbor Signaled Session Down.
    NeighborDown,
    /// Forwarding Plane Reset.
    ForwardingReset,
    /// Path Down.
    PathDown,
    /// Concatenated Path Down.
    ConcatenatedPathDown,
    /// Administratively Down.
    AdminDown,
    /// Reverse Concatenated Path Down.
    ReverseConcatenatedPathDown,
    /// A code RFC 5880 does not define (9-31), kept as sent.
    Other(u8),
}

impl Diag {
    fn from_bits(b: u8) -> Diag {
        match b & 0x1f {
            0 => Diag::None,
            1 => Diag::TimeExpired,
            2 => Diag::EchoFailed,
            3 => Diag::NeighborDown,
            4 => Diag::ForwardingReset,
            5 => Diag::PathDown,
            6 => Diag::ConcatenatedPathDown,
            7 => Diag::AdminDown,
            8 => Diag::ReverseConcatenatedPathDown,
            n => Diag::Other(n),
        }
    }

    fn bits(self) -> u8 {
        match self {
            Diag::None => 0,
            Diag::TimeExpired => 1,
            Diag::EchoFailed => 2,
            Diag::NeighborDown => 3,
            Diag::ForwardingReset => 4,
            Diag::PathDown => 5,
            Diag::ConcatenatedPathDown => 6,
            Diag::AdminDown => 7,
            Diag::ReverseConcatenatedPathDown => 8,
            Diag::Other(n) => n & 0x1f,
        }
    }

    /// The RFC's words, for logs and `tern peers`.
    pub fn text(self) -> String {
        match self {
            Diag::None => "no diagnostic".into(),
            Diag::TimeExpired => "control detection time expired".into(),
            Diag::EchoFailed => "echo function failed".into(),
            Diag::NeighborDown => "neighbor signaled session down".into(),
            Diag::ForwardingReset => "forwarding plane reset".into(),
            Diag::PathDown => "path down".into(),
            Diag::ConcatenatedPathDown => "concatenated path down".into(),
            Diag::AdminDown => "administratively down".into(),
            Diag::ReverseConcatenatedPathDown => "reverse concatenated path down".into(),
            Diag::Other(n) => format!("diagnostic code {n}"),
        }
    }
}

/// A BFD control packet's mandatory section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Packet {
    /// Why the sender's session last changed.
    pub diag: Diag,
    /// The sender's session state.
    pub state: State,
    /// Poll: the sender changed its parameters and waits for a Final.
    pub poll: bool,
    /// Final: the answer to a Poll.
    pub fin: bool,
    /// Control Plane Independent: the sender's BFD survives its control plane.
    pub cpi: bool,
    /// An authentication section follows.
    pub auth: bool,
    /// Demand mode (not used by tern).
    pub demand: bool,
    /// Detect multiplier.
    pub detect_mult: u8,
    /// The sender's discriminator.
    pub my_discr: u32,
    /// The receiver's discriminator as the sender knows it (0: not yet).
    pub your_discr: u32,
    /// Desired Min TX Interval, microseconds.
    pub desired_min_tx: u32,
    /// Required Min RX Interval, microseconds.
    pub required_min_rx: u32,
    /// Required Min Echo RX Interval, microseconds (0: no echo).
    pub required_min_echo_rx: u32,
}

/// Why a received packet is discarded before any session sees it (RFC 5880 §6.8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the mandatory section, or than the Length field says.
    #[error("packet of {got} bytes, shorter than {need}")]
    Short {
        /// Bytes received.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Not version 1.
    #[error("BFD version {0}, not 1")]
    Version(u8),
    /// The Length field is below the minimum for the packet.
    #[error("Length field {0} is below the minimum")]
    Length(u8),
    /// Detect Mult is zero.
    #[error("detect multiplier 0")]
    ZeroMult,
    /// The Multipoint bit is set.
    #[error("multipoint bit set")]
    Multipoint,
    /// My Discriminator is zero.
    #[error("My Discriminator is 0")]
    ZeroDiscriminator,
    /// Your Discriminator is zero while the sender is neither Down nor AdminDown.
    #[error("Your Discriminator is 0 in state {0:?}")]
    NoYourDiscriminator(State),
}

fn word(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

impl Packet {
    /// Decodes and checks a received packet.
    pub fn decode(b: &[u8]) -> Result<Packet, DecodeError> {
        let [b0, b1, mult, len] = match b.get(..4) {
            Some(&[b0, b1, m, l]) if b.len() >= LEN => [b0, b1, m, l],
            _ => {
                return Err(DecodeError::Short {
                    got: b.len(),
                    need: LEN,
                })
            }
        };
        let version = b0 >> 5;
        if version != 1 {
            return Err(DecodeError::Version(version));
        }
        let auth = b1 & 0x04 != 0;
        // With authentication the section adds at least 2 bytes (type and length).
        let min = if auth { LEN + 2 } else { LEN };
        if usize::from(len) < min {
            return Err(DecodeError::Length(len));
        }
        if usize::from(len) > b.len() {
            return Err(DecodeError::Short {
                got: b.len(),
                need: usize::from(len),
            });
        }
        if mult == 0 {
            return Err(DecodeError::ZeroMult);
        }
        if b1 & 0x01 != 0 {
            return Err(DecodeError::Multipoint);
        }
        let p = Packet {
            diag: Diag::from_bits(b0),
            state: State::from_bits(b1 >> 6),
            poll: b1 & 0x20 != 0,
            fin: b1 & 0x10 != 0,
            cpi: b1 & 0x08 != 0,
            auth,
            demand: b1 & 0x02 != 0,
            detect_mult: mult,
            my_discr: word(b, 4),
            your_discr: word(b, 8),
            desired_min_tx: word(b, 12),
            required_min_rx: word(b, 16),
            required_min_echo_rx: word(b, 20),
        };
        if p.my_discr == 0 {
            return Err(DecodeError::ZeroDiscriminator);
        }
        if p.your_discr == 0 && !matches!(p.state, State::Down | State::AdminDown) {
            return Err(DecodeError::NoYourDiscriminator(p.state));
        }
        Ok(p)
    }

    /// The packet on the wire (without an authentication section).
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[0] = (1 << 5) | self.diag.bits();
        out[1] = (self.state.bits() << 6)
            | (u8::from(self.poll) << 5)
            | (u8::from(self.fin) << 4)
            | (u8::from(self.cpi) << 3)
            | (u8::from(self.auth) << 2)
            | (u8::from(self.demand) << 1);
        out[2] = self.detect_mult;
        out[3] = LEN as u8;
        out[4..8].copy_from_slice(&self.my_discr.to_be_bytes());
        out[8..12].copy_from_slice(&self.your_discr.to_be_bytes());
        out[12..16].copy_from_slice(&self.desired_min_tx.to_be_bytes());
        out[16..20].copy_from_slice(&self.required_min_rx.to_be_bytes());
        out[20..24].copy_from_slice(&self.required_min_echo_rx.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    fn sample() -> Packet {
        Packet {
            diag: Diag::TimeExpired,
            state: State::Up,
            poll: true,
            fin: false,
            cpi: true,
            auth: false,
            demand: false,
            detect_mult: 3,
            my_discr: 0x1122_3344,
            your_discr: 7,
            desired_min_tx: 100_000,
            required_min_rx: 300_000,
            required_min_echo_rx: 0,
        }
    }

    #[test]
    fn the_layout_is_rfc_5880s() {
        let b = sample().encode();
        assert_eq!(b[0], 0x21, "version 1, diag 1");
        assert_eq!(b[1], 0xc0 | 0x20 | 0x08, "Up, P, C");
        assert_eq!(&b[2..4], &[3, 24]);
        assert_eq!(&b[4..8], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[12..16], &100_000u32.to_be_bytes());
        assert_eq!(Packet::decode(&b).unwrap(), sample());
    }

    #[test]
    fn the_checks_of_6_8_6_discard_before_any_session() {
        let good = sample().encode();
        let with = |f: &dyn Fn(&mut [u8; LEN])| {
            let mut b = good;
            f(&mut b);
            Packet::decode(&b)
        };
        assert_eq!(
            Packet::decode(&good[..20]),
            Err(DecodeError::Short { got: 20, need: 24 })
        );
        assert_eq!(with(&|b| b[0] = 0x41), Err(DecodeError::Version(2)));
        assert_eq!(with(&|b| b[3] = 20), Err(DecodeError::Length(20)));
        assert_eq!(
            with(&|b| b[3] = 30),
            Err(DecodeError::Short { got: 24, need: 30 })
        );
        assert_eq!(with(&|b| b[2] = 0), Err(DecodeError::ZeroMult));
        assert_eq!(with(&|b| b[1] |= 1), Err(DecodeError::Multipoint));
        assert_eq!(
            with(&|b| b[4..8].fill(0)),
            Err(DecodeError::ZeroDiscriminator)
        );
        assert_eq!(
            with(&|b| b[8..12].fill(0)),
            Err(DecodeError::NoYourDiscriminator(State::Up))
        );
        // Down with no Your Discriminator is how every session starts.
        let down = Packet {
            state: State::Down,
            your_discr: 0,
            ..sample()
        };
        assert_eq!(Packet::decode(&down.encode()).unwrap(), down);
        // An authentication section needs at least 26 bytes.
        assert_eq!(with(&|b| b[1] |= 4), Err(DecodeError::Length(24)));
    }
}
