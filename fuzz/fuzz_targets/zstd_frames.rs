//! Restore's zstd frame reader over a stored object: bytes from the repo, which the manifest's
//! checksums should have vouched for, but the reader must stand on its own. It either reports
//! why the bytes are not a sequence of checked frames, or writes exactly what a reference
//! decoder makes of them.
//!
//! The first input byte picks the form: raw bytes as the stored object, or the rest compressed
//! into frames as a backup writes them, then changed at the places the input names.
#![no_main]

use std::io::Write;
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use lifeboat_mover::stream::{ContentCheck, read_stored_file};

/// Largest uncompressed frame the reader accepts here; small, so that inputs reach it.
const MAX_FRAME: u64 = 64 << 10;

fn scratch() -> &'static (tempfile::TempDir, PathBuf, PathBuf) {
    static DIR: std::sync::OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> =
        std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::path::Path::new("/dev/shm");
        let d = if base.is_dir() {
            tempfile::tempdir_in(base)
        } else {
            tempfile::tempdir()
        }
        .expect("a scratch directory");
        let (a, b) = (d.path().join("stored"), d.path().join("restored"));
        (d, a, b)
    })
}

/// Frames as the backup writes them: each declares its size and carries a content checksum.
fn frames(content: &[u8], frame: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let chunks: Vec<&[u8]> = if content.is_empty() {
        vec![&[]]
    } else {
        content.chunks(frame).collect()
    };
    for c in chunks {
        let mut z = zstd::bulk::Compressor::new(1).expect("compressor");
        z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .expect("checksum flag");
        z.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))
            .expect("size flag");
        out.extend(z.compress(c).expect("compresses"));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (stored, original) = if mode % 2 == 0 {
        (rest.to_vec(), None)
    } else {
        // [edits: n][n × (offset u16, xor u8)][content]
        let n = usize::from(mode / 2 % 4);
        if rest.len() < 3 * n {
            return;
        }
        let (edits, content) = rest.split_at(3 * n);
        let frame = 1 + usize::from(mode / 8) * 97;
        let mut z = frames(content, frame);
        for e in edits.chunks(3) {
            let at = usize::from(u16::from_le_bytes([e[0], e[1]]));
            let len = z.len().max(1);
            if let Some(b) = z.get_mut(at % len) {
                *b ^= e[2];
            }
        }
        (z, (n == 0).then(|| content.to_vec()))
    };
    let (_, stored_path, dest) = scratch();
    std::fs::File::create(stored_path)
        .and_then(|mut f| f.write_all(&stored))
        .expect("writes the stored object");
    for check in [ContentCheck::Frame, ContentCheck::Sha256] {
        let report = read_stored_file(stored_path, dest, MAX_FRAME, check).expect("reads");
        assert_eq!(report.stored_bytes, stored.len() as u64);
        let written = std::fs::read(dest).expect("reads what was written");
        match &report.error {
            None => {
                let reference = zstd::stream::decode_all(stored.as_slice())
                    .expect("what the reader accepted, the reference decoder accepts");
                assert_eq!(
                    written, reference,
                    "the reader wrote other bytes than zstd decodes"
                );
                assert_eq!(report.raw_bytes, written.len() as u64);
                if let Some(o) = &original {
                    assert_eq!(&written, o);
                }
            }
            Some(why) => {
                assert!(!why.is_empty());
                assert!(original.is_none(), "an unchanged backup was refused: {why}");
            }
        }
    }
});
