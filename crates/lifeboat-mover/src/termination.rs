//! The result lines, also written as the container's termination message.
//!
//! The kubelet keeps a container's termination message in the pod's status after it exits, so
//! the operator can read a Job's result from the pod it already watches: no request through the
//! API server to the node, and nothing lost when the log is rotated or the node is gone. The log
//! stays the fallback, for results longer than a message can hold.

use std::io::Write;
use std::path::Path;

/// The most the kubelet keeps of a termination message; it keeps the *end* of a longer file, so
/// a longer message would begin with half a line.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// The last whole lines of `lines` that fit in `max` bytes, each ending in a newline. Empty when
/// not even the last one fits: the reader then falls back to the log, which holds every line.
pub fn tail_that_fits(lines: &[String], max: usize) -> String {
    let mut start = lines.len();
    let mut size = 0;
    while start > 0 {
        let next = lines[start - 1].len() + 1;
        if size + next > max {
            break;
        }
        size += next;
        start -= 1;
    }
    lines[start..].iter().fold(String::new(), |mut s, l| {
        s.push_str(l);
        s.push('\n');
        s
    })
}

/// Writes the result lines to `path` when that file exists, as the kubelet's
/// `/dev/termination-log` does in every container; never creates it, so a run outside Kubernetes
/// leaves nothing behind. Failing to write is logged, not fatal: the log still holds the result.
pub fn write(path: &Path, lines: &[String]) {
    let message = tail_that_fits(lines, MAX_MESSAGE_BYTES);
    if message.is_empty() {
        return;
    }
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path);
    let written = match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => Err(e),
        Ok(mut f) => f.write_all(message.as_bytes()),
    };
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the termination message; the result is in the log only");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn keeps_the_last_whole_lines_that_fit() {
        let l = lines(&["aaaa", "bb", "cc"]);
        assert_eq!(tail_that_fits(&l, 100), "aaaa\nbb\ncc\n");
        assert_eq!(tail_that_fits(&l, 6), "bb\ncc\n");
        assert_eq!(tail_that_fits(&l, 8), "bb\ncc\n");
        assert_eq!(tail_that_fits(&l, 2), "");
        assert_eq!(tail_that_fits(&[], 10), "");
    }

    #[test]
    fn writes_only_into_a_file_that_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let absent = dir.path().join("termination-log");
        write(&absent, &lines(&["{\"a\":1}"]));
        assert!(!absent.exists(), "the message file must never be created");

        std::fs::write(&absent, "old and longer content\n").expect("create");
        write(&absent, &lines(&["{\"a\":1}", "{\"b\":2}"]));
        assert_eq!(
            std::fs::read_to_string(&absent).expect("read"),
            "{\"a\":1}\n{\"b\":2}\n"
        );
    }
}
