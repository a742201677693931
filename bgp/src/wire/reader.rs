//! A bounds-checked cursor over received bytes.
//!
//! Every read from a peer's bytes goes through [`Reader`], which returns `None` instead
//! of panicking when the input is short; the decoders turn `None` into the RFC error
//! that fits where they were reading. No indexing of peer input happens elsewhere.

use bytes::Bytes;

/// A cursor over a `Bytes` buffer; sub-slices share the buffer (no copy).
#[derive(Debug, Clone)]
pub(crate) struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Reader {
        Reader { buf, pos: 0 }
    }

    /// Bytes left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        let s = self.slice(2)?;
        Some(u16::from_be_bytes([s[0], s[1]]))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        let s = self.slice(4)?;
        Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// Borrows the next `n` bytes.
    pub(crate) fn slice(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// Takes the next `n` bytes as a shared sub-buffer.
    pub(crate) fn bytes(&mut self, n: usize) -> Option<Bytes> {
        let end = self.pos.checked_add(n)?;
        if end > self.buf.len() {
            return None;
        }
        let b = self.buf.slice(self.pos..end);
        self.pos = end;
        Some(b)
    }

    /// Takes everything left.
    pub(crate) fn rest(&mut self) -> Bytes {
        let b = self.buf.slice(self.pos.min(self.buf.len())..);
        self.pos = self.buf.len();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_return_none_and_do_not_advance() {
        let mut r = Reader::new(Bytes::from_static(&[1, 2, 3]));
        assert_eq!(r.u16(), Some(0x0102));
        assert_eq!(r.u16(), None);
        assert_eq!(r.u32(), None);
        assert_eq!(r.bytes(2), None);
        assert_eq!(r.u8(), Some(3));
        assert_eq!(r.u8(), None);
        assert!(r.is_empty());
        assert_eq!(r.slice(usize::MAX), None);
    }
}
