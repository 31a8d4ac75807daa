//! Streaming object transfer: read → hash → compress → hash → upload for backups, and
//! download → hash → decompress → hash → write for restores, with bounded buffers so memory use
//! does not grow with the dataset.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetResultPayload, ObjectStoreExt, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::direct::{DirectWriter, Writes, WrittenHow};
use crate::error::{Error, Result};
use crate::manifest::ObjectEntry;
use crate::repo::Repo;

/// Read and channel chunk size for the stored (compressed) stream.
const CHUNK: usize = 1 << 20;
/// Multipart part size; S3 requires at least 5 MiB for all parts but the last.
const PART: usize = 5 << 20;
/// Parts uploaded concurrently.
const PART_CONCURRENCY: usize = 2;
const CHANNEL_DEPTH: usize = 4;
/// Uncompressed bytes per zstd frame. Objects are sequences of independent frames so that both
/// compression and decompression can use every core; at this size (twice zstd's level-3 window)
/// the ratio cost of restarting the window is negligible. Part of the repo format.
pub const FRAME_SIZE: usize = 4 << 20;

/// How restore proves that the bytes it writes are the bytes that were backed up.
///
/// Both modes check the stored object's sha256 and size against the manifest (the object is the
/// one the backup wrote, whole) and every frame's zstd content checksum while decompressing (each
/// frame decoded to what was compressed). `sha256` also hashes the uncompressed output again and
/// compares it with the manifest: about half a CPU-second per GB more, on the one thread that
/// writes, for a check the first two already imply.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContentCheck {
    /// Stored sha256 plus each frame's zstd content checksum.
    #[default]
    Frame,
    /// Also the sha256 of the uncompressed bytes.
    Sha256,
}

/// Whether a zstd frame declares a content checksum (Frame_Header_Descriptor bit 2, after the
/// 4-byte magic number). Restore refuses frames without one: their content would go unchecked.
fn has_content_checksum(frame: &[u8]) -> bool {
    const MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
    frame.len() > 4 && frame[..4] == MAGIC && frame[4] & 0x04 != 0
}

/// A numbered piece of an object, in stream order.
type Job = (u64, Vec<u8>);
/// A job queue shared by a pool of worker threads.
type SharedJobs = Arc<Mutex<Receiver<Job>>>;

/// Worker threads for (de)compression.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// What was stored for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub size: u64,
    pub sha256: String,
    pub stored_size: u64,
    pub stored_sha256: String,
}

/// Abbreviates a digest for one-line messages; the full value is in the manifest.
pub fn short(h: &str) -> String {
    format!("{}..", &h[..h.len().min(12)])
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

enum ProduceError {
    /// Reading the source failed.
    Read(std::io::Error),
    /// The consumer went away; its own error explains why.
    Stopped,
    Compress(std::io::Error),
}

/// A fixed set of reusable frame-sized buffers. Recycling them keeps memory flat and avoids
/// the page-fault cost of fresh multi-megabyte allocations for every frame.
struct Pool {
    tx: SyncSender<Vec<u8>>,
    rx: Mutex<Receiver<Vec<u8>>>,
    /// Set when a consumer failed: buffers it held are gone, so waiting for one could hang.
    closed: std::sync::atomic::AtomicBool,
}

impl Pool {
    fn new(n: usize) -> Arc<Pool> {
        let (tx, rx) = sync_channel(n);
        for _ in 0..n {
            let _ = tx.send(Vec::with_capacity(FRAME_SIZE));
        }
        Arc::new(Pool {
            tx,
            rx: Mutex::new(rx),
            closed: false.into(),
        })
    }
    /// Blocks until a buffer is free; `None` once the pool is closed.
    fn take(&self) -> Option<Vec<u8>> {
        use std::sync::atomic::Ordering;
        let rx = self.rx.lock().ok()?;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            if let Ok(mut b) = rx.recv_timeout(std::time::Duration::from_millis(50)) {
                b.clear();
                return Some(b);
            }
        }
    }
    fn give(&self, b: Vec<u8>) {
        let _ = self.tx.try_send(b);
    }
    fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Reads `file` in frame-sized segments and hashes them (raw digest).
fn read_segments(
    mut file: std::fs::File,
    pool: &Pool,
    tx: SyncSender<Job>,
) -> Result<(u64, String), ProduceError> {
    let mut sha = Sha256::new();
    let mut n = 0u64;
    let mut seq = 0u64;
    loop {
        let mut seg = pool.take().ok_or(ProduceError::Stopped)?;
        seg.resize(FRAME_SIZE, 0);
        let mut filled = 0;
        while filled < FRAME_SIZE {
            let k = read_full(&mut file, &mut seg[filled..]).map_err(ProduceError::Read)?;
            if k == 0 {
                break;
            }
            filled += k;
        }
        // An empty file still becomes one (empty) frame: every object is a valid zstd stream.
        if filled == 0 && seq > 0 {
            break;
        }
        seg.truncate(filled);
        sha.update(&seg);
        n += filled as u64;
        crate::progress::add(filled as u64);
        tx.send((seq, seg)).map_err(|_| ProduceError::Stopped)?;
        seq += 1;
        if filled < FRAME_SIZE {
            break;
        }
    }
    Ok((n, hex::encode(sha.finalize())))
}

/// Compresses segments into independent frames with content size and checksum.
fn compress_segments(
    level: i32,
    rx: SharedJobs,
    pool: Arc<Pool>,
    tx: SyncSender<(u64, Bytes)>,
) -> Result<(), ProduceError> {
    let mut c = zstd::bulk::Compressor::new(level).map_err(ProduceError::Compress)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .map_err(ProduceError::Compress)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))
        .map_err(ProduceError::Compress)?;
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(FRAME_SIZE));
    loop {
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return Err(ProduceError::Stopped),
        };
        let Ok((seq, seg)) = job else { return Ok(()) };
        out.clear();
        c.compress_to_buffer(&seg, &mut out)
            .map_err(ProduceError::Compress)?;
        pool.give(seg);
        // Copied out at its exact size: the uploader holds on to it until its part is sent.
        tx.send((seq, Bytes::copy_from_slice(&out)))
            .map_err(|_| ProduceError::Stopped)?;
    }
}

/// Puts frames back in order, hashes them as stored and hands them to the uploader.
fn emit_in_order(
    rx: Receiver<(u64, Bytes)>,
    tx: mpsc::Sender<Bytes>,
) -> Result<(u64, String), ProduceError> {
    let mut sha = Sha256::new();
    let mut n = 0u64;
    let mut next = 0u64;
    let mut pending = BTreeMap::new();
    for (seq, frame) in rx {
        pending.insert(seq, frame);
        while let Some(frame) = pending.remove(&next) {
            sha.update(&frame);
            n += frame.len() as u64;
            tx.blocking_send(frame).map_err(|_| ProduceError::Stopped)?;
            next += 1;
        }
    }
    if !pending.is_empty() {
        return Err(ProduceError::Stopped);
    }
    Ok((n, hex::encode(sha.finalize())))
}

/// Compresses `file` into the object at `location`. `source_path` names the file in messages.
pub async fn upload(
    repo: &Repo,
    location: &Path,
    file: std::fs::File,
    source_path: &std::path::Path,
    level: i32,
    workers: usize,
) -> Result<Stored> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
    let workers = workers.max(1);
    let producer = tokio::task::spawn_blocking(
        move || -> Result<(u64, String, u64, String), ProduceError> {
            let pool = Pool::new(workers + 2);
            let (seg_tx, seg_rx) = sync_channel::<Job>(1);
            let (frame_tx, frame_rx) = sync_channel::<(u64, Bytes)>(workers);
            let seg_rx = Arc::new(Mutex::new(seg_rx));
            let threads: Vec<_> = (0..workers)
                .map(|_| {
                    let (rx, tx, pool) = (seg_rx.clone(), frame_tx.clone(), pool.clone());
                    std::thread::spawn(move || {
                        let r = compress_segments(level, rx, pool.clone(), tx);
                        if r.is_err() {
                            pool.close();
                        }
                        r
                    })
                })
                .collect();
            drop(frame_tx);
            let epool = pool.clone();
            let emitter = std::thread::spawn(move || {
                let r = emit_in_order(frame_rx, tx);
                if r.is_err() {
                    epool.close();
                }
                r
            });
            let read = read_segments(file, &pool, seg_tx);
            let mut compress_result = Ok(());
            for t in threads {
                let r = t.join().unwrap_or(Err(ProduceError::Stopped));
                if compress_result.is_ok() {
                    compress_result = r;
                }
            }
            let emitted = emitter.join().unwrap_or(Err(ProduceError::Stopped));
            // Report the root cause: a read or compression failure stops the others.
            match (read, compress_result, emitted) {
                (Err(e @ ProduceError::Read(_)), _, _) => Err(e),
                (_, Err(e @ ProduceError::Compress(_)), _) => Err(e),
                (Ok((raw_n, raw_sha)), Ok(()), Ok((stored_n, stored_sha))) => {
                    Ok((raw_n, raw_sha, stored_n, stored_sha))
                }
                _ => Err(ProduceError::Stopped),
            }
        },
    );

    let what = format!("uploading {location}");
    let upload = repo
        .store
        .put_multipart(location)
        .await
        .map_err(|e| repo.error(&what, &e));
    let upload = match upload {
        Ok(u) => u,
        Err(e) => {
            drop(rx);
            let _ = producer.await;
            return Err(e);
        }
    };
    let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
    let mut consumer_err = None;
    while let Some(chunk) = rx.recv().await {
        if let Err(e) = w.wait_for_capacity(PART_CONCURRENCY).await {
            consumer_err = Some(repo.error(&what, &e));
            break;
        }
        w.put(chunk);
    }
    drop(rx);
    let produced = producer
        .await
        .map_err(|e| Error::Internal(format!("compression task failed: {e}")));
    let fail = match (consumer_err, produced) {
        (Some(e), _) => Some(e),
        (None, Err(e)) => Some(e),
        (None, Ok(Err(ProduceError::Read(e)))) => Some(Error::local_io("reading", source_path, e)),
        (None, Ok(Err(ProduceError::Compress(e)))) => Some(Error::Internal(format!(
            "zstd compression of {}: {e}",
            source_path.display()
        ))),
        (None, Ok(Err(ProduceError::Stopped))) => Some(Error::Internal(format!(
            "upload of {} stopped without an error",
            source_path.display()
        ))),
        (None, Ok(Ok((size, sha256, stored_size, stored_sha256)))) => {
            w.finish().await.map_err(|e| repo.error(&what, &e))?;
            return Ok(Stored {
                size,
                sha256,
                stored_size,
                stored_sha256,
            });
        }
    };
    // Abort so that S3 does not keep the parts; the object itself never became visible.
    let _ = w.abort().await;
    Err(fail.unwrap_or_else(|| Error::Internal("upload failed".into())))
}

/// Bytes written between background flushes of the destination file.
const FLUSH_EVERY: u64 = 32 << 20;

/// Puts decompressed frames back in order, hashes and writes them to `file`, then fsyncs it.
/// Returns the byte count and digest, and the first decompression error in stream order (after
/// which nothing more is written).
///
/// A helper thread flushes what has been written so far every `FLUSH_EVERY` bytes. Without it
/// the kernel keeps the whole file dirty in the page cache and the final fsync writes all of it
/// while nothing else happens; with it the disk works while the next frames are decompressed.
fn write_in_order(
    rx: Receiver<(u64, Result<Vec<u8>, String>)>,
    pool: &Pool,
    mut file: DirectWriter,
    failed: &std::sync::atomic::AtomicBool,
    check: ContentCheck,
) -> std::io::Result<(u64, Option<String>, Option<String>, WrittenHow)> {
    let flush_file = file.handle().try_clone()?;
    let (ftx, frx) = sync_channel::<()>(1);
    let flusher = std::thread::spawn(move || -> std::io::Result<()> {
        for () in frx {
            flush_file.sync_data()?;
        }
        Ok(())
    });
    let mut sha = (check == ContentCheck::Sha256).then(Sha256::new);
    let mut n = 0u64;
    let mut since_flush = 0u64;
    let mut result = Ok(());
    let mut next = 0u64;
    let mut pending = BTreeMap::new();
    let mut bad: Option<String> = None;
    for (seq, frame) in rx {
        if bad.is_some() || result.is_err() {
            // Keep draining so the workers can finish; return buffers so none of them blocks.
            if let Ok(f) = frame {
                pool.give(f);
            }
            continue;
        }
        pending.insert(seq, frame);
        while let Some(frame) = pending.remove(&next) {
            next += 1;
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            };
            if let Some(sha) = sha.as_mut() {
                sha.update(&frame);
            }
            if let Err(e) = file.write_all(&frame) {
                result = Err(e);
                // Tells the reader to stop: nothing more can be written.
                failed.store(true, std::sync::atomic::Ordering::Release);
                break;
            }
            n += frame.len() as u64;
            crate::progress::add(frame.len() as u64);
            since_flush += frame.len() as u64;
            pool.give(frame);
            if since_flush >= FLUSH_EVERY {
                // A full channel means a flush is already pending; that one covers these bytes.
                let _ = ftx.try_send(());
                since_flush = 0;
            }
        }
        if bad.is_some() || result.is_err() {
            for (_, f) in std::mem::take(&mut pending) {
                if let Ok(f) = f {
                    pool.give(f);
                }
            }
        }
    }
    drop(ftx);
    let flushed = flusher
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("flush thread panicked")));
    result?;
    flushed?;
    let (_, how) = file.finish()?;
    Ok((n, sha.map(|s| hex::encode(s.finalize())), bad, how))
}

/// Decompresses frames; each must declare its content size, at most `max_frame`.
fn decompress_frames(
    max_frame: u64,
    rx: SharedJobs,
    pool: Arc<Pool>,
    tx: SyncSender<(u64, Result<Vec<u8>, String>)>,
) {
    let mut d = match zstd::bulk::Decompressor::new() {
        Ok(d) => d,
        Err(e) => {
            let _ = tx.send((0, Err(format!("zstd: {e}"))));
            return;
        }
    };
    loop {
        // The output buffer is taken before the job: the worker holding the oldest frame must
        // never wait for a buffer held by the writer for a younger one.
        let Some(mut out) = pool.take() else { return };
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok((seq, frame)) = job else { return };
        let checked = match zstd::zstd_safe::get_frame_content_size(&frame) {
            _ if !has_content_checksum(&frame) => {
                Err(format!("frame {seq} carries no zstd content checksum"))
            }
            Ok(Some(size)) if size <= max_frame => {
                out.reserve(size as usize);
                match d.decompress_to_buffer(&frame, &mut out) {
                    Ok(k) if k as u64 == size => Ok(()),
                    Ok(k) => Err(format!(
                        "frame {seq} decompressed to {k} bytes, header says {size}"
                    )),
                    Err(e) => Err(format!("frame {seq} cannot be decompressed: {e}")),
                }
            }
            _ => Err(format!(
                "frame {seq} has no valid content size of at most {max_frame} bytes"
            )),
        };
        // A refused frame hands its buffer back: the pool is fixed, and each buffer lost to an
        // error left one fewer, until a worker waited for one forever and the restore hung
        // (found by the zstd_frames fuzz target).
        let res = match checked {
            Ok(()) => Ok(out),
            Err(e) => {
                pool.give(out);
                Err(e)
            }
        };
        if tx.send((seq, res)).is_err() {
            return;
        }
    }
}

enum Input {
    File(std::fs::File),
    Channel(mpsc::Receiver<Bytes>),
}

impl Input {
    /// Appends the next chunk to `out`; returns its length, 0 at the end.
    fn append_to(&mut self, out: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Input::File(f) => {
                let start = out.len();
                out.resize(start + CHUNK, 0);
                let n = read_full(f, &mut out[start..]);
                out.truncate(start + *n.as_ref().unwrap_or(&0));
                n
            }
            Input::Channel(rx) => Ok(match rx.blocking_recv() {
                Some(b) => {
                    out.extend_from_slice(&b);
                    b.len()
                }
                None => 0,
            }),
        }
    }
}

/// Downloads the object of `entry` into `dest` (which must be a temporary name), checking sizes
/// and both checksums, and fsyncs it. On any failure the partial file is removed.
pub async fn download(
    repo: &Repo,
    backup: &str,
    entry: &ObjectEntry,
    max_frame: u64,
    dest: &std::path::Path,
    check: ContentCheck,
    writes: Writes,
) -> Result<WrittenHow> {
    let r = download_inner(repo, backup, entry, max_frame, dest, check, writes).await;
    if r.is_err() {
        let _ = std::fs::remove_file(dest);
    }
    r
}

async fn download_inner(
    repo: &Repo,
    backup: &str,
    entry: &ObjectEntry,
    max_frame: u64,
    dest: &std::path::Path,
    check: ContentCheck,
    writes: Writes,
) -> Result<WrittenHow> {
    let object = entry
        .key
        .strip_prefix("objects/")
        .unwrap_or(&entry.key)
        .to_string();
    let integrity = |cause: String| Error::Integrity {
        backup: backup.to_string(),
        object: object.clone(),
        cause,
    };
    let location = repo.object_path(backup, &entry.key);
    let got = match repo.store.get(&location).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(integrity("is missing from the repo".to_string()));
        }
        Err(e) => return Err(repo.error(&format!("reading {location}"), &e)),
    };
    let (input, pump) = match got.payload {
        // Local repos are read directly: object_store's generic stream uses 8 KiB chunks.
        GetResultPayload::File(f, _) => (Input::File(f), None),
        GetResultPayload::Stream(_) => {
            let (tx, rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
            let mut s = got.into_stream();
            let pump = tokio::spawn(async move {
                while let Some(item) = s.next().await {
                    match item {
                        Ok(b) => {
                            if tx.send(b).await.is_err() {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            });
            (Input::Channel(rx), Some(pump))
        }
    };
    let dest_owned = dest.to_path_buf();
    let consumer = tokio::task::spawn_blocking(move || {
        consume(
            input,
            &dest_owned,
            default_workers(),
            max_frame,
            check,
            writes,
        )
    });
    let consumed = consumer
        .await
        .map_err(|e| Error::Internal(format!("restore task failed: {e}")))?;
    if let Some(p) = pump {
        match p.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(repo.error(&format!("reading {location}"), &e)),
            Err(e) => return Err(Error::Internal(format!("download task failed: {e}"))),
        }
    }
    let c = consumed?;
    if c.stored_n != entry.stored_size {
        return Err(integrity(if c.stored_n < entry.stored_size {
            format!(
                "is truncated: expected {} stored bytes, got {}",
                entry.stored_size, c.stored_n
            )
        } else {
            format!(
                "is too long: expected {} stored bytes, got {}",
                entry.stored_size, c.stored_n
            )
        }));
    }
    if c.stored_sha != entry.stored_sha256 {
        return Err(integrity(format!(
            "checksum mismatch: expected sha256 {}, got {}",
            short(&entry.stored_sha256),
            short(&c.stored_sha)
        )));
    }
    if let Some(e) = c.decompress_err {
        return Err(integrity(format!("cannot be decompressed: {e}")));
    }
    if c.raw_n != entry.size {
        return Err(integrity(format!(
            "uncompressed content mismatch: expected {} bytes, got {}",
            entry.size, c.raw_n
        )));
    }
    if let Some(raw_sha) = c.raw_sha.filter(|s| *s != entry.sha256) {
        return Err(integrity(format!(
            "uncompressed content mismatch: expected sha256 {}, got {}",
            short(&entry.sha256),
            short(&raw_sha)
        )));
    }
    Ok(c.how)
}

/// What the frame reader made of one stored object, read from a local file: see
/// [`read_stored_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameReport {
    /// Stored bytes read.
    pub stored_bytes: u64,
    /// Uncompressed bytes written to the destination.
    pub raw_bytes: u64,
    /// Why the stored bytes are not a sequence of checked frames; `None` when they are.
    pub error: Option<String>,
}

/// Runs restore's frame reader (split into frames, decompress in parallel, write in order) over
/// a stored object in a local file, with no manifest to compare against. Restore reaches the
/// same code through [`download`]; this entry exists for the fuzz target of the reader.
pub fn read_stored_file(
    stored: &std::path::Path,
    dest: &std::path::Path,
    max_frame: u64,
    check: ContentCheck,
) -> Result<FrameReport> {
    let f = std::fs::File::open(stored).map_err(|e| Error::local_io("reading", stored, e))?;
    let c = consume(Input::File(f), dest, 2, max_frame, check, Writes::default())?;
    Ok(FrameReport {
        stored_bytes: c.stored_n,
        raw_bytes: c.raw_n,
        error: c.decompress_err,
    })
}

struct Consumed {
    stored_n: u64,
    stored_sha: String,
    raw_n: u64,
    /// Only with [`ContentCheck::Sha256`].
    raw_sha: Option<String>,
    decompress_err: Option<String>,
    how: WrittenHow,
}

/// Largest stored frame accepted: zstd's bound for an incompressible frame of `max_frame`.
fn max_stored_frame(max_frame: u64) -> usize {
    zstd::zstd_safe::compress_bound(max_frame as usize) + 1024
}

fn consume(
    mut input: Input,
    dest: &std::path::Path,
    workers: usize,
    max_frame: u64,
    check: ContentCheck,
    writes: Writes,
) -> Result<Consumed> {
    let io = |e| Error::local_io("writing", dest, e);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dest)
        .map_err(io)?;
    let file = DirectWriter::new(file, dest, writes);
    let workers = workers.max(1);
    let pool = Pool::new(workers + 2);
    let (frame_tx, frame_rx) = sync_channel::<Job>(workers);
    let (out_tx, out_rx) = sync_channel::<(u64, Result<Vec<u8>, String>)>(workers + 2);
    let frame_rx = Arc::new(Mutex::new(frame_rx));
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (rx, tx, pool) = (frame_rx.clone(), out_tx.clone(), pool.clone());
            std::thread::spawn(move || decompress_frames(max_frame, rx, pool, tx))
        })
        .collect();
    drop(out_tx);
    let wpool = pool.clone();
    let write_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let wfailed = write_failed.clone();
    let writer = std::thread::spawn(move || write_in_order(out_rx, &wpool, file, &wfailed, check));

    let mut stored_sha = Sha256::new();
    let mut stored_n = 0u64;
    // Splitting into frames stops at the first malformed frame, but the rest is still hashed so
    // the report can name the checksum mismatch (the root cause) rather than a zstd symptom.
    let mut split_err: Option<String> = None;
    let mut pending: Vec<u8> = Vec::new();
    let mut scratch: Vec<u8> = Vec::new();
    let mut seq = 0u64;
    let mut stopped = false;
    let mut read_err = None;
    loop {
        if write_failed.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        let collecting = split_err.is_none() && !stopped;
        let target = if collecting {
            &mut pending
        } else {
            scratch.clear();
            &mut scratch
        };
        let start = target.len();
        let n = match input.append_to(target) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                read_err = Some(e);
                break;
            }
        };
        stored_sha.update(&target[start..start + n]);
        stored_n += n as u64;
        if !collecting {
            continue;
        }
        loop {
            match zstd::zstd_safe::find_frame_compressed_size(&pending) {
                Ok(len) if len <= pending.len() => {
                    let frame = pending[..len].to_vec();
                    pending.drain(..len);
                    if frame_tx.send((seq, frame)).is_err() {
                        stopped = true;
                        break;
                    }
                    seq += 1;
                }
                _ => {
                    if pending.len() > max_stored_frame(max_frame) {
                        split_err = Some(format!("frame {seq} is malformed"));
                        pending = Vec::new();
                    }
                    break;
                }
            }
        }
    }
    if split_err.is_none() && !pending.is_empty() {
        split_err = Some(format!("ends inside frame {seq}"));
    }
    if split_err.is_none() && seq == 0 && read_err.is_none() {
        split_err = Some("holds no zstd frame".to_string());
    }
    // Closing the channel lets the workers and then the writer finish.
    drop(frame_tx);
    for t in threads {
        let _ = t.join();
    }
    let written = writer
        .join()
        .map_err(|_| Error::Internal("restore writer thread panicked".into()))?;
    let (raw_n, raw_sha, bad_frame, how) = written.map_err(io)?;
    if let Some(e) = read_err {
        return Err(Error::Internal(format!("reading stored object: {e}")));
    }
    Ok(Consumed {
        stored_n,
        stored_sha: hex::encode(stored_sha.finalize()),
        raw_n,
        raw_sha,
        decompress_err: split_err.or(bad_frame),
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Role;

    fn repo(dir: &std::path::Path) -> Repo {
        Repo::local(dir)
    }

    /// Mildly compressible data whose every frame differs, so misordered frames are detectable.
    fn data(len: usize) -> Vec<u8> {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        (0..len)
            .map(|i| {
                if i % 3 == 0 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                (x >> (i % 3 * 8)) as u8 & 0x3f
            })
            .collect()
    }

    async fn round_trip(len: usize, workers: usize) {
        let t = tempfile::tempdir().unwrap();
        let repo_dir = t.path().join("repo");
        std::fs::create_dir(&repo_dir).unwrap();
        let r = repo(&repo_dir);
        let src = t.path().join("src.rdb");
        let original = data(len);
        std::fs::write(&src, &original).unwrap();
        let loc = r.object_path("b", "objects/dump.rdb.zst");
        let f = std::fs::File::open(&src).unwrap();
        let s = upload(&r, &loc, f, &src, 3, workers).await.unwrap();
        assert_eq!(s.size, len as u64);
        assert_eq!(s.sha256, hex::encode(Sha256::digest(&original)));

        // Any zstd decoder reads the object: it is a plain sequence of frames.
        let stored = std::fs::read(repo_dir.join("b/objects/dump.rdb.zst")).unwrap();
        assert_eq!(stored.len() as u64, s.stored_size);
        assert_eq!(zstd::decode_all(&stored[..]).unwrap(), original);

        let entry = ObjectEntry {
            name: "dump.rdb".into(),
            role: Role::Rdb,
            key: "objects/dump.rdb.zst".into(),
            size: s.size,
            sha256: s.sha256.clone(),
            stored_size: s.stored_size,
            stored_sha256: s.stored_sha256.clone(),
        };
        for check in [ContentCheck::Frame, ContentCheck::Sha256] {
            let dest = t.path().join(format!("out-{check:?}.rdb"));
            fetch(&r, &entry, &dest, check).await.unwrap();
            assert!(
                std::fs::read(&dest).unwrap() == original,
                "restored bytes differ ({check:?})"
            );
        }
    }

    /// Writes `stored` as object `x` and returns its manifest entry, with `size` and `sha256`
    /// the uncompressed content's and the stored checksum matching the stored bytes, so that
    /// only the content checks can object.
    fn stored_object(dir: &std::path::Path, stored: &[u8], raw: &[u8]) -> ObjectEntry {
        let path = dir.join("b/objects");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("x.zst"), stored).unwrap();
        ObjectEntry {
            name: "x".into(),
            role: Role::Rdb,
            key: "objects/x.zst".into(),
            size: raw.len() as u64,
            sha256: hex::encode(Sha256::digest(raw)),
            stored_size: stored.len() as u64,
            stored_sha256: hex::encode(Sha256::digest(stored)),
        }
    }

    /// Restores object `x` of backup `b` into `dest` with the default frame size.
    async fn fetch(
        r: &Repo,
        entry: &ObjectEntry,
        dest: &std::path::Path,
        check: ContentCheck,
    ) -> Result<()> {
        download(
            r,
            "b",
            entry,
            FRAME_SIZE as u64,
            dest,
            check,
            Writes::default(),
        )
        .await
        .map(|_| ())
    }

    fn frame(raw: &[u8], checksum: bool) -> Vec<u8> {
        let mut c = zstd::bulk::Compressor::new(3).unwrap();
        c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(checksum))
            .unwrap();
        c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))
            .unwrap();
        c.compress(raw).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frame_whose_content_checksum_differs_is_refused_in_both_modes() {
        let t = tempfile::tempdir().unwrap();
        let r = repo(t.path());
        let raw = data(100_000);
        let mut stored = frame(&raw, true);
        // The last four bytes are the frame's content checksum: the stored sha256 (recomputed
        // here) cannot see this damage, so it is the frame check's alone to catch.
        let last = stored.len() - 1;
        stored[last] ^= 0x01;
        let entry = stored_object(t.path(), &stored, &raw);
        for check in [ContentCheck::Frame, ContentCheck::Sha256] {
            let dest = t.path().join("out");
            let err = fetch(&r, &entry, &dest, check).await.unwrap_err();
            assert!(
                err.to_string().contains("cannot be decompressed")
                    && err.to_string().contains("checksum"),
                "{check:?}: {err}"
            );
            assert!(!dest.exists(), "partial file must be removed");
        }
    }

    /// Found by the zstd_frames fuzz target: every refused frame kept its output buffer, so an
    /// object with more bad frames than the pool has buffers hung the restore for good.
    #[test]
    fn many_refused_frames_end_in_a_report_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let stored = dir.path().join("stored");
        let raw: Vec<u8> = (0..64u32).flat_map(|i| i.to_le_bytes()).collect();
        let bad: Vec<u8> = (0..32).flat_map(|_| frame(&raw, false)).collect();
        std::fs::write(&stored, &bad).unwrap();
        let dest = dir.path().join("restored");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_stored_file(
                &stored,
                &dest,
                1 << 20,
                ContentCheck::Frame,
            ));
        });
        let report = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the reader reports within a minute instead of hanging")
            .unwrap();
        assert!(
            report
                .error
                .as_deref()
                .is_some_and(|e| e.contains("no zstd content checksum")),
            "{report:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frame_without_a_content_checksum_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let r = repo(t.path());
        let raw = data(10_000);
        let entry = stored_object(t.path(), &frame(&raw, false), &raw);
        let dest = t.path().join("out");
        let err = fetch(&r, &entry, &dest, ContentCheck::Frame)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("frame 0 carries no zstd content checksum"),
            "{err}"
        );
        // The same frame with its checksum restores: the refusal is about the checksum alone.
        let entry = stored_object(t.path(), &frame(&raw, true), &raw);
        fetch(&r, &entry, &dest, ContentCheck::Frame).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), raw);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sha256_mode_compares_the_uncompressed_bytes_with_the_manifest() {
        let t = tempfile::tempdir().unwrap();
        let r = repo(t.path());
        let raw = data(10_000);
        let mut entry = stored_object(t.path(), &frame(&raw, true), &raw);
        entry.sha256 = hex::encode(Sha256::digest(b"something else"));
        let dest = t.path().join("out");
        let err = fetch(&r, &entry, &dest, ContentCheck::Sha256)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("uncompressed content mismatch: expected sha256"),
            "{err}"
        );
        assert!(!dest.exists(), "partial file must be removed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn multi_frame_objects_round_trip_in_order() {
        round_trip(FRAME_SIZE * 3 + 12345, 4).await;
        round_trip(FRAME_SIZE, 2).await;
        round_trip(17, 1).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn empty_file_is_one_empty_frame() {
        round_trip(0, 2).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_larger_than_the_manifest_allows_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let r = repo(t.path());
        let src = t.path().join("src");
        std::fs::write(&src, data(1 << 20)).unwrap();
        let loc = r.object_path("b", "objects/x.zst");
        let s = upload(&r, &loc, std::fs::File::open(&src).unwrap(), &src, 3, 2)
            .await
            .unwrap();
        let entry = ObjectEntry {
            name: "x".into(),
            role: Role::Rdb,
            key: "objects/x.zst".into(),
            size: s.size,
            sha256: s.sha256,
            stored_size: s.stored_size,
            stored_sha256: s.stored_sha256,
        };
        let dest = t.path().join("out");
        let err = download(
            &r,
            "b",
            &entry,
            1 << 10,
            &dest,
            ContentCheck::Frame,
            Writes::default(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("content size of at most 1024"),
            "{err}"
        );
        assert!(!dest.exists(), "partial file must be removed");
    }
}
