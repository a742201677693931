//! The socket options BGP needs that std and tokio lack: TCP-MD5 signatures (RFC 2385,
//! `TCP_MD5SIG`), GTSM (RFC 5082: `IP_MINTTL` / `IPV6_MINHOPCOUNT` for what we accept,
//! TTL / hop limit 255 for what we send), `IPV6_V6ONLY` and the saved SYN
//! (`TCP_SAVE_SYN`, from which the listener reads the TTL a connection arrived with).
//! This is an FFI edge: each `unsafe` block is a single `setsockopt`/`getsockopt`
//! with a SAFETY note.
//!
//! Windows has none of TCP-MD5 and minimum TTL for TCP (its `IPPROTO_IP` options are
//! `IP_TTL` for sending and `IP_RECVTTL` for datagrams' ancillary data only), so
//! [`unsupported`] names what a peer asks for that the platform cannot honour, and
//! such a peer is refused rather than run without it.

use std::io;
use std::net::IpAddr;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;

/// The TTL (hop limit) every GTSM segment is sent with.
pub const GTSM_TTL: u8 = 255;

/// The smallest TTL a segment from a peer at most `max_hops` away arrives with
/// (RFC 5082: sent with 255, one less per router).
pub fn gtsm_min_ttl(max_hops: u8) -> u8 {
    GTSM_TTL - (max_hops.max(1) - 1)
}

/// What of a peer's settings this platform cannot honour, in plain words; `None`
/// when it honours them all.
pub fn unsupported(password: bool, ttl_security: bool) -> Option<String> {
    if cfg!(target_os = "linux") {
        return None;
    }
    let mut what = Vec::new();
    if password {
        what.push("TCP-MD5 (password): the system has no TCP-MD5 socket option");
    }
    if ttl_security {
        what.push("GTSM (ttlSecurity): the system has no minimum-TTL socket option for TCP");
    }
    (!what.is_empty()).then(|| {
        format!(
            "not supported on this platform: {}; the peer is refused rather than run without it",
            what.join("; ")
        )
    })
}

/// One integer socket option.
#[cfg(target_os = "linux")]
fn set_int(
    sock: &impl AsRawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: valid fd for the borrow; pointer and size describe a c_int on the stack.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct tcp_md5sig` from linux/tcp.h (libc does not define it).
#[cfg(target_os = "linux")]
#[repr(C)]
struct TcpMd5Sig {
    addr: libc::sockaddr_storage,
    flags: u8,
    prefixlen: u8,
    keylen: u16,
    pad: u32,
    key: [u8; 80],
}

/// Signs every segment to and from `peer` with `password` (TCP_MD5SIG). The address
/// must be of the socket's family: an IPv4 peer on an IPv6 socket is named
/// IPv4-mapped (the kernel refuses an AF_INET address there with EINVAL).
#[cfg(target_os = "linux")]
pub fn set_md5(sock: &impl AsRawFd, peer: IpAddr, password: &str) -> io::Result<()> {
    let key = password.as_bytes();
    if key.len() > 80 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TCP-MD5 password longer than 80 bytes",
        ));
    }
    // SAFETY: sockaddr_storage and the rest are plain data; all-zero is a valid value.
    let mut sig: TcpMd5Sig = unsafe { std::mem::zeroed() };
    match peer {
        IpAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let sin = unsafe {
                &mut *(&mut sig.addr as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
        }
        IpAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe {
                &mut *(&mut sig.addr as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = a.octets();
        }
    }
    sig.keylen = key.len() as u16;
    sig.key[..key.len()].copy_from_slice(key);
    // SAFETY: the fd is a valid socket for the borrow; the pointer and length describe
    // `sig`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            (&sig as *const TcpMd5Sig).cast(),
            std::mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// GTSM, receiving: the kernel drops segments from `peer` that arrive with a TTL (hop
/// limit) below [`gtsm_min_ttl`]. An IPv4 peer seen IPv4-mapped on an IPv6 socket
/// travels as IPv4, whose TTL the kernel checks against `IP_MINTTL` (which an IPv6
/// TCP socket takes too), so both options are set then.
#[cfg(target_os = "linux")]
pub fn set_min_ttl(sock: &impl AsRawFd, peer: IpAddr, max_hops: u8) -> io::Result<()> {
    let min = libc::c_int::from(gtsm_min_ttl(max_hops));
    match peer {
        IpAddr::V4(_) => set_int(sock, libc::IPPROTO_IP, libc::IP_MINTTL, min),
        IpAddr::V6(a) => {
            if a.to_ipv4_mapped().is_some() {
                set_int(sock, libc::IPPROTO_IP, libc::IP_MINTTL, min)?;
            }
            set_int(sock, libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT, min)
        }
    }
}

/// GTSM, sending: every segment to `peer` leaves with TTL (hop limit) 255. As for
/// [`set_min_ttl`], an IPv4-mapped peer needs the IPv4 TTL.
#[cfg(target_os = "linux")]
pub fn set_ttl_out(sock: &impl AsRawFd, peer: IpAddr) -> io::Result<()> {
    let ttl = libc::c_int::from(GTSM_TTL);
    match peer {
        IpAddr::V4(_) => set_int(sock, libc::IPPROTO_IP, libc::IP_TTL, ttl),
        IpAddr::V6(a) => {
            if a.to_ipv4_mapped().is_some() {
                set_int(sock, libc::IPPROTO_IP, libc::IP_TTL, ttl)?;
            }
            set_int(sock, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, ttl)
        }
    }
}

/// Makes an IPv6 socket take IPv6 only (`on`) or IPv4-mapped traffic too, whatever the
/// system's default (Linux: `net.ipv6.bindv6only`, Windows: v6-only).
#[cfg(target_os = "linux")]
pub fn set_v6only(sock: &impl AsRawFd, on: bool) -> io::Result<()> {
    set_int(
        sock,
        libc::IPPROTO_IPV6,
        libc::IPV6_V6ONLY,
        libc::c_int::from(on),
    )
}

/// Keeps the SYN of each connection a listening socket accepts, for [`syn_ttl`].
#[cfg(target_os = "linux")]
pub fn save_syn(sock: &impl AsRawFd) -> io::Result<()> {
    set_int(sock, libc::IPPROTO_TCP, libc::TCP_SAVE_SYN, 1)
}

/// The TTL (hop limit) the SYN of an accepted connection arrived with, if its
/// listening socket kept it ([`save_syn`]); the kernel hands it out once.
#[cfg(target_os = "linux")]
pub fn syn_ttl(sock: &impl AsRawFd) -> Option<u8> {
    let mut buf = [0u8; 512];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: valid fd for the borrow; the pointer and length describe `buf`, and the
    // kernel writes at most `len` bytes and stores the length written in `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_SAVED_SYN,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    header_ttl(buf.get(..usize::try_from(len).ok()?)?)
}

/// The TTL (IPv4, byte 8) or hop limit (IPv6, byte 7) of an IP header.
pub fn header_ttl(ip: &[u8]) -> Option<u8> {
    match ip.first()? >> 4 {
        4 => ip.get(8).copied(),
        6 => ip.get(7).copied(),
        _ => None,
    }
}

/// TCP-MD5 is not available on this platform.
#[cfg(not(target_os = "linux"))]
pub fn set_md5<S>(_sock: &S, _peer: IpAddr, _password: &str) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TCP-MD5 is not supported on this platform",
    ))
}

/// GTSM is not available on this platform.
#[cfg(not(target_os = "linux"))]
pub fn set_min_ttl<S>(_sock: &S, _peer: IpAddr, _max_hops: u8) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "GTSM (minimum TTL) is not supported on this platform",
    ))
}

/// GTSM is not available on this platform (sending with 255 alone is not GTSM).
#[cfg(not(target_os = "linux"))]
pub fn set_ttl_out<S>(_sock: &S, _peer: IpAddr) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "GTSM (minimum TTL) is not supported on this platform",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtsm_thresholds() {
        assert_eq!(gtsm_min_ttl(1), 255);
        assert_eq!(gtsm_min_ttl(0), 255);
        assert_eq!(gtsm_min_ttl(2), 254);
        assert_eq!(gtsm_min_ttl(255), 1);
    }

    #[test]
    fn ttl_of_ip_headers() {
        let mut v4 = [0u8; 20];
        v4[0] = 0x45;
        v4[8] = 253;
        assert_eq!(header_ttl(&v4), Some(253));
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[7] = 254;
        assert_eq!(header_ttl(&v6), Some(254));
        assert_eq!(header_ttl(&[0x45, 0, 0]), None);
        assert_eq!(header_ttl(&[]), None);
        assert_eq!(header_ttl(&[0x10; 40]), None);
    }

    #[test]
    fn what_the_platform_cannot_honour() {
        assert_eq!(unsupported(false, false), None);
        if cfg!(target_os = "linux") {
            assert_eq!(unsupported(true, true), None);
        } else {
            let both = unsupported(true, true).unwrap_or_default();
            assert!(both.contains("TCP-MD5") && both.contains("GTSM"), "{both}");
        }
    }

    /// The kernel takes what is set and reports it back.
    #[cfg(target_os = "linux")]
    #[test]
    fn options_reach_the_kernel() {
        let get = |s: &std::net::TcpListener, level, opt| {
            let mut v: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: as in the module: valid fd, pointer and length of a c_int.
            let rc = unsafe {
                libc::getsockopt(
                    s.as_raw_fd(),
                    level,
                    opt,
                    (&mut v as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0);
            v
        };
        let v6 = std::net::TcpListener::bind("[::1]:0").unwrap();
        let mapped: IpAddr = "::ffff:198.51.100.1".parse().unwrap();
        set_min_ttl(&v6, mapped, 2).unwrap();
        set_ttl_out(&v6, mapped).unwrap();
        assert_eq!(get(&v6, libc::IPPROTO_IP, libc::IP_MINTTL), 254);
        assert_eq!(get(&v6, libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT), 254);
        assert_eq!(get(&v6, libc::IPPROTO_IP, libc::IP_TTL), 255);
        assert_eq!(get(&v6, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS), 255);
        // IPV6_V6ONLY only before bind.
        let fresh = tokio::net::TcpSocket::new_v6().unwrap();
        set_v6only(&fresh, true).unwrap();
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: as above.
        let rc = unsafe {
            libc::getsockopt(
                fresh.as_raw_fd(),
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, v), (0, 1));
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_min_ttl(&v4, "198.51.100.1".parse().unwrap(), 1).unwrap();
        assert_eq!(get(&v4, libc::IPPROTO_IP, libc::IP_MINTTL), 255);
    }
}
