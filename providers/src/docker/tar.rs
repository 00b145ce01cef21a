//! The few ustar headers the docker provider writes: an engine's archive endpoint (`PUT
//! /containers/{id}/archive`) takes a tar, and ours hold one or two root-owned entries (the
//! enrollment token, the guest binary). Written by hand instead of a tar crate: a header is 512
//! bytes of fixed fields and this is all of the format we need.

/// A tar block; headers, data padding and the end marker come in these.
pub(crate) const BLOCK: usize = 512;

/// One entry's header: `path` relative (no leading `/`), owned by root.
pub(crate) struct Header<'a> {
    pub path: &'a str,
    pub mode: u32,
    pub size: u64,
    pub kind: Kind,
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    File,
    Dir,
}

impl Header<'_> {
    /// The 512-byte ustar header. Paths longer than 100 bytes are refused: ours are short and
    /// fixed, so a long one is a programming error rather than input.
    pub fn encode(&self) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        let name = self.path.as_bytes();
        assert!(name.len() <= 100, "tar path {} is too long", self.path);
        h[..name.len()].copy_from_slice(name);
        octal(&mut h[100..108], u64::from(self.mode));
        octal(&mut h[108..116], 0); // uid
        octal(&mut h[116..124], 0); // gid
        octal(&mut h[124..136], self.size);
        octal(&mut h[136..148], 0); // mtime: content is what matters, not when it was written
        h[156] = match self.kind {
            Kind::File => b'0',
            Kind::Dir => b'5',
        };
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        // The checksum is computed with its own field read as spaces.
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
        octal(&mut h[148..155], sum);
        h[155] = b' ';
        h
    }
}

/// Writes `v` as zero-padded octal filling `field` but its last byte, which stays NUL.
fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    assert!(
        s.len() == digits,
        "{v} does not fit a {digits}-digit tar field"
    );
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
}

/// Zero bytes that pad `size` bytes of data up to a whole block.
pub(crate) fn padding(size: u64) -> usize {
    let rem = (size % BLOCK as u64) as usize;
    if rem == 0 {
        0
    } else {
        BLOCK - rem
    }
}

/// The end-of-archive marker: two zero blocks.
pub(crate) const END: [u8; 2 * BLOCK] = [0; 2 * BLOCK];

/// A whole archive of small in-memory entries: `(header, data)` pairs in order.
pub(crate) fn archive(entries: &[(Header<'_>, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (header, data) in entries {
        debug_assert_eq!(header.size, data.len() as u64);
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(data);
        out.resize(out.len() + padding(data.len() as u64), 0);
    }
    out.extend_from_slice(&END);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_and_checksum() {
        let h = Header {
            path: "etc/rakazo/enroll-token",
            mode: 0o600,
            size: 5,
            kind: Kind::File,
        }
        .encode();
        assert_eq!(&h[..23], b"etc/rakazo/enroll-token");
        assert_eq!(&h[100..108], b"0000600\0");
        assert_eq!(&h[124..136], b"00000000005\0");
        assert_eq!(h[156], b'0');
        let stored = u64::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        let mut blank = h;
        blank[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, blank.iter().map(|b| u64::from(*b)).sum::<u64>());
    }

    #[test]
    fn archive_pads_to_blocks_and_ends_with_two_zero_blocks() {
        let a = archive(&[(
            Header {
                path: "a",
                mode: 0o644,
                size: 3,
                kind: Kind::File,
            },
            b"abc",
        )]);
        assert_eq!(a.len(), 4 * BLOCK);
        assert_eq!(&a[BLOCK..BLOCK + 3], b"abc");
        assert!(a[BLOCK + 3..].iter().all(|b| *b == 0));
        assert_eq!(padding(0), 0);
        assert_eq!(padding(512), 0);
        assert_eq!(padding(513), 511);
    }
}
