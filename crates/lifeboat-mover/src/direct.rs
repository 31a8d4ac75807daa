//! Writing a restored file around the page cache.
//!
//! A profile of restore on the development VM put 46% of its CPU time in the kernel copying
//! written bytes into freshly allocated page-cache pages (`copy_folio_from_iter_atomic`), more
//! than zstd's decompression (29%). The restored file is not read again by this process, and the
//! server that reads it starts later, so caching it buys nothing. `O_DIRECT` writes go from the
//! process's memory to the device instead. They need block-aligned memory, lengths and offsets,
//! so bytes are staged in an aligned buffer and written in whole blocks; the unaligned tail, and
//! everything on a filesystem that refuses `O_DIRECT`, goes through an ordinary handle.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Alignment and length unit of direct writes; covers every common logical block size.
const ALIGN: usize = 4096;
/// Bytes staged per direct write.
const STAGE: usize = 8 << 20;

/// A file written sequentially, directly where possible.
pub struct DirectWriter {
    /// The same file opened with `O_DIRECT`; `None` when the filesystem refused it.
    direct: Option<File>,
    /// An ordinary handle: the tail, the fallback, and the final fsync.
    file: File,
    stage: Vec<u8>,
    /// Where the aligned part of `stage` begins.
    start: usize,
    filled: usize,
    /// Bytes written to the file so far.
    offset: u64,
}

impl DirectWriter {
    /// Wraps `file`, which was created (empty) at `path`. Direct writes are used only if `path`
    /// opens with `O_DIRECT`.
    pub fn new(file: File, path: &Path) -> DirectWriter {
        let direct = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok();
        let stage = if direct.is_some() {
            vec![0u8; STAGE + ALIGN]
        } else {
            Vec::new()
        };
        let start = stage.as_ptr().align_offset(ALIGN).min(ALIGN);
        DirectWriter {
            direct,
            file,
            stage,
            start,
            filled: 0,
            offset: 0,
        }
    }

    /// The ordinary handle, for flushing from another thread.
    pub fn handle(&self) -> &File {
        &self.file
    }

    /// Whether writes still go around the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Appends `data`.
    pub fn write_all(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        if self.direct.is_none() {
            self.file.write_all_at(data, self.offset)?;
            self.offset += data.len() as u64;
            return Ok(());
        }
        while !data.is_empty() {
            let take = (STAGE - self.filled).min(data.len());
            let at = self.start + self.filled;
            self.stage[at..at + take].copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled == STAGE {
                self.flush_blocks(STAGE)?;
            }
        }
        Ok(())
    }

    /// Writes the first `n` staged bytes (a multiple of `ALIGN`) and keeps the rest staged.
    fn flush_blocks(&mut self, n: usize) -> std::io::Result<()> {
        let chunk = &self.stage[self.start..self.start + n];
        let written = match &self.direct {
            Some(d) => match d.write_all_at(chunk, self.offset) {
                Ok(()) => true,
                // Refused by this filesystem after all: rewrite the same range through the
                // page cache (idempotent, whatever part the direct write got to), and stay there.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => false,
                Err(e) => return Err(e),
            },
            None => false,
        };
        if !written {
            self.direct = None;
            self.file.write_all_at(chunk, self.offset)?;
        }
        self.offset += n as u64;
        self.stage
            .copy_within(self.start + n..self.start + self.filled, self.start);
        self.filled -= n;
        Ok(())
    }

    /// Writes what is staged and fsyncs the file (data and metadata). Returns the bytes written.
    pub fn finish(mut self) -> std::io::Result<u64> {
        let whole = self.filled / ALIGN * ALIGN;
        if whole > 0 {
            self.flush_blocks(whole)?;
        }
        if self.filled > 0 {
            let tail = &self.stage[self.start..self.start + self.filled];
            self.file.write_all_at(tail, self.offset)?;
            self.offset += self.filled as u64;
        }
        self.file.sync_all()?;
        Ok(self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    fn write_in_pieces(pieces: &[usize]) -> (Vec<u8>, Vec<u8>, bool) {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("out");
        let file = File::create(&path).unwrap();
        let mut w = DirectWriter::new(file, &path);
        let direct = w.is_direct();
        let total: usize = pieces.iter().sum();
        let want = data(total);
        let mut at = 0;
        for &p in pieces {
            w.write_all(&want[at..at + p]).unwrap();
            at += p;
        }
        assert_eq!(w.finish().unwrap(), total as u64);
        (want, std::fs::read(&path).unwrap(), direct)
    }

    #[test]
    fn any_split_of_the_bytes_lands_in_order_with_the_unaligned_tail() {
        for pieces in [
            vec![0],
            vec![1],
            vec![ALIGN],
            vec![STAGE],
            vec![STAGE + 1],
            vec![3 * STAGE - 17, 5, 4 << 20, 12_345],
            vec![ALIGN - 1, ALIGN + 1, STAGE - 2, 2 * STAGE + 3],
        ] {
            let (want, got, direct) = write_in_pieces(&pieces);
            assert!(
                got == want,
                "pieces {pieces:?} (direct: {direct}) wrote different bytes"
            );
        }
    }

    #[test]
    fn the_development_filesystem_takes_direct_writes() {
        // Where the temp dir supports O_DIRECT (ext4, xfs) the writer must actually use it, or
        // the fast path silently never runs.
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("probe");
        let file = File::create(&path).unwrap();
        let supported = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .is_ok();
        let mut w = DirectWriter::new(file, &path);
        w.write_all(&data(STAGE)).unwrap();
        assert_eq!(
            w.is_direct(),
            supported,
            "direct writes fell back on a filesystem that takes them"
        );
        w.finish().unwrap();
    }
}
