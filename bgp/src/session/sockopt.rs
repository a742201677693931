//! The two socket options BGP needs that socket2 lacks: TCP-MD5 signatures (RFC 2385,
//! `TCP_MD5SIG`) and GTSM (RFC 5082, `IP_MINTTL` / `IPV6_MINHOPCOUNT`). This is an FFI
//! edge: each `unsafe` block is a single `setsockopt` with a SAFETY note.

use std::io;
use std::net::IpAddr;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;

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

/// Signs every segment to and from `peer` with `password` (TCP_MD5SIG).
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

/// GTSM: accept only segments that arrive with a TTL (hop limit) of at least
/// `256 - max_hops`; the caller also sends with TTL 255.
#[cfg(target_os = "linux")]
pub fn set_min_ttl(sock: &impl AsRawFd, peer: IpAddr, max_hops: u8) -> io::Result<()> {
    let min: libc::c_int = 256 - libc::c_int::from(max_hops.max(1));
    let (level, opt) = match peer {
        IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MINTTL),
        IpAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT),
    };
    // SAFETY: valid fd for the borrow; pointer and size describe a c_int on the stack.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&min as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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
