//! Key material in the data directory: the service's signing keys and other secrets, as
//! private files (mode 0600) written atomically (temporary file, fsync, rename).

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use pricing_core::jws::{Signer, StoredKey};
use pricing_core::time::Timestamp;
use rand_core::{OsRng, RngCore};

use crate::EmbeddedError;

/// The file of the signing keys in the data directory: a JSON array of `StoredKey`.
pub const SIGNING_KEYS_FILE: &str = "signing-keys.json";

/// Loads the signing keys from `dir/signing-keys.json`, creating the file with one new
/// active key on first use. Two processes starting at once end up with the same keys: the
/// file is created only if absent, and the loser reads the winner's.
pub fn load_or_create_signing_keys(dir: &Path) -> Result<Vec<StoredKey>, EmbeddedError> {
    let path = dir.join(SIGNING_KEYS_FILE);
    let (bytes, created) = load_or_create_private_file(&path, || {
        let now = Timestamp(chrono::Utc::now());
        let keys = vec![StoredKey::generate(new_kid(now), now)?];
        serde_json::to_vec_pretty(&keys).map_err(|e| EmbeddedError::Invalid {
            path: path.clone(),
            detail: e.to_string(),
        })
    })?;
    let keys = parse_keys(&path, &bytes)?;
    if created {
        tracing::info!(path = %path.display(), kid = %keys[0].kid, "created a signing key");
    }
    Ok(keys)
}

/// The lock file of [`rotate_signing_keys`]'s read-modify-write of the key file.
const SIGNING_KEYS_LOCK_FILE: &str = "signing-keys.lock";

/// Rotates the signing keys in `dir/signing-keys.json` (see `pricing_core::jws::rotate`)
/// and returns the new set. The file is replaced atomically. Rotations take turns on
/// `dir/signing-keys.lock` (a running `serve` does not hold it: it only reads the file),
/// so each one reads the set the one before it wrote and every rotated-in key is kept.
/// A missing file is [`EmbeddedError::Missing`]: a new set in its place would leave
/// what the old one signed unverifiable, which only [`new_signing_keys`] does, on
/// purpose.
pub fn rotate_signing_keys(dir: &Path) -> Result<Vec<StoredKey>, EmbeddedError> {
    let path = dir.join(SIGNING_KEYS_FILE);
    let _turn = take_turn(dir)?;
    let current =
        read_signing_keys(dir)?.ok_or_else(|| EmbeddedError::Missing { path: path.clone() })?;
    let now = Timestamp(chrono::Utc::now());
    let new = StoredKey::generate(new_kid(now), now)?;
    let kid = new.kid.clone();
    let keys = pricing_core::jws::rotate(&current, new, now);
    let bytes = serde_json::to_vec_pretty(&keys).map_err(|e| EmbeddedError::Invalid {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    write_private_file(&path, &bytes)?;
    tracing::info!(path = %path.display(), %kid, "rotated the signing keys");
    let dropped = pricing_core::jws::dropped_kids(&current, &keys);
    if !dropped.is_empty() {
        tracing::warn!(path = %path.display(), dropped = ?dropped, kept = pricing_core::jws::MAX_RETIRED_KEYS,
            "the rotation dropped the oldest retired keys: what they signed can no longer be verified");
    }
    Ok(keys)
}

/// Makes a new key set in `dir/signing-keys.json` where there is none (one active key,
/// signing at once), and returns it; an existing file is refused
/// ([`EmbeddedError::Invalid`]): that is a rotation's.
pub fn new_signing_keys(dir: &Path) -> Result<Vec<StoredKey>, EmbeddedError> {
    let path = dir.join(SIGNING_KEYS_FILE);
    let _turn = take_turn(dir)?;
    if read_private_file(&path)?.is_some() {
        return Err(EmbeddedError::Invalid {
            path,
            detail: "a key set is there already: rotate it instead".into(),
        });
    }
    load_or_create_signing_keys(dir)
}

/// Waits for, then holds, the exclusive lock on `dir/signing-keys.lock` until the returned
/// file is dropped. On a file system without locks (some network ones) it goes on
/// unguarded, and says so.
fn take_turn(dir: &Path) -> Result<File, EmbeddedError> {
    create_private_dir(dir)?;
    let path = dir.join(SIGNING_KEYS_LOCK_FILE);
    let mut options = OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(&path).map_err(|e| io_err("open", &path, e))?;
    let locked = match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {
            tracing::info!(path = %path.display(), "waiting for another rotation of the signing keys");
            file.lock()
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    };
    if let Err(e) = locked {
        tracing::warn!(path = %path.display(), error = %e,
            "cannot lock the signing keys: make sure no other rotation runs at the same time");
    }
    remove_stale_temporaries(dir);
    Ok(file)
}

/// Removes the temporary copies of the key file (private keys, 0600) that a rotation or
/// a first start killed between writing and renaming left behind, once they are a minute
/// old (a first start making the file does not take the lock, and takes well under
/// that). Run by every rotation and by `serve` at start.
pub fn remove_stale_temporaries(dir: &Path) {
    let prefix = format!(".{SIGNING_KEYS_FILE}.");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(&prefix) && name.ends_with(".tmp")) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= std::time::Duration::from_secs(60));
        if stale && fs::remove_file(entry.path()).is_ok() {
            tracing::info!(path = %entry.path().display(), "removed a stale temporary key file");
        }
    }
}

/// Reads the signing keys from `dir` if the file exists and is valid.
pub fn read_signing_keys(dir: &Path) -> Result<Option<Vec<StoredKey>>, EmbeddedError> {
    let path = dir.join(SIGNING_KEYS_FILE);
    match read_private_file(&path)? {
        None => Ok(None),
        Some(bytes) => parse_keys(&path, &bytes).map(Some),
    }
}

fn new_kid(now: Timestamp) -> String {
    format!("k{}-{}", now.0.format("%Y%m%d"), random_hex(4))
}

/// Reads the private file at `path`, or creates it with `make()` when it does not exist.
/// Concurrent creators agree: the file is created only if absent and the loser reads the
/// winner's content. Returns the content and whether this call created it.
pub fn load_or_create_private_file(
    path: &Path,
    make: impl FnOnce() -> Result<Vec<u8>, EmbeddedError>,
) -> Result<(Vec<u8>, bool), EmbeddedError> {
    if let Some(bytes) = read_private_file(path)? {
        return Ok((bytes, false));
    }
    let bytes = make()?;
    if create_private_file(path, &bytes)? {
        return Ok((bytes, true));
    }
    let existing = read_private_file(path)?.ok_or_else(|| EmbeddedError::Invalid {
        path: path.to_path_buf(),
        detail: "vanished while being created".into(),
    })?;
    Ok((existing, false))
}

fn parse_keys(path: &Path, bytes: &[u8]) -> Result<Vec<StoredKey>, EmbeddedError> {
    let invalid = |detail: String| EmbeddedError::Invalid {
        path: path.to_path_buf(),
        detail,
    };
    let keys: Vec<StoredKey> =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("not a key list: {e}")))?;
    // Every key must decode and one must be active.
    Signer::from_keys(&keys).map_err(|e| invalid(e.to_string()))?;
    Ok(keys)
}

/// Writes `bytes` to `path` atomically, readable by the owner only (0600). A reader sees
/// the old content or the new, never a mix; after return the content survives a crash.
/// Missing parent directories are created (0700).
pub fn write_private_file(path: &Path, bytes: &[u8]) -> Result<(), EmbeddedError> {
    let tmp = write_temp(path, bytes)?;
    fs::rename(&tmp, path).map_err(|source| {
        let _ = fs::remove_file(&tmp);
        io_err("rename into", path, source)
    })?;
    sync_parent(path)
}

/// Reads a private file; `None` when it does not exist. Warns when group or others may
/// read it.
pub fn read_private_file(path: &Path) -> Result<Option<Vec<u8>>, EmbeddedError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", path, e)),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "secret file is readable by others than its owner");
            }
        }
    }
    Ok(Some(bytes))
}

/// Like [`write_private_file`], but only if `path` does not exist yet: returns false (and
/// writes nothing) when it does.
fn create_private_file(path: &Path, bytes: &[u8]) -> Result<bool, EmbeddedError> {
    let tmp = write_temp(path, bytes)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_parent(path)?;
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(_) => {
            // No hard links on this file system: fall back to an existence check + rename.
            if path.exists() {
                return Ok(false);
            }
            write_private_file(path, bytes)?;
            Ok(true)
        }
    }
}

/// Writes and fsyncs a private temporary file beside `path`.
fn write_temp(path: &Path, bytes: &[u8]) -> Result<PathBuf, EmbeddedError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    create_private_dir(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        random_hex(6)
    ));
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let result = options.open(&tmp).and_then(|mut f: File| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(io_err("write", &tmp, e));
    }
    Ok(tmp)
}

fn create_private_dir(dir: &Path) -> Result<(), EmbeddedError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| io_err("create the directory", dir, e))
}

/// Makes a rename in the directory durable.
fn sync_parent(path: &Path) -> Result<(), EmbeddedError> {
    #[cfg(unix)]
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err("sync the directory", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn io_err(op: &'static str, path: &Path, source: std::io::Error) -> EmbeddedError {
    EmbeddedError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    OsRng.fill_bytes(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_the_old_key_published() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_signing_keys(dir.path()).unwrap();
        let rotated = rotate_signing_keys(dir.path()).unwrap();
        assert_eq!(rotated.len(), 2);
        assert_eq!(rotated[0].kid, first[0].kid);
        assert_eq!(rotated[0].status, pricing_core::jws::KeyStatus::Retired);
        let read = read_signing_keys(dir.path()).unwrap().unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].kid, rotated[1].kid);
    }

    #[test]
    fn rotations_at_the_same_moment_each_keep_their_key() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create_signing_keys(dir.path()).unwrap();
        let sets: Vec<Vec<StoredKey>> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| rotate_signing_keys(dir.path()).unwrap()))
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        });
        // Each run's new key is the active one of the set it wrote; every one of them is
        // in the file, and so is the first key: nine keys, one active.
        let read = read_signing_keys(dir.path()).unwrap().unwrap();
        assert_eq!(read.len(), 9);
        for set in &sets {
            let active = set
                .iter()
                .find(|k| k.status == pricing_core::jws::KeyStatus::Active)
                .unwrap();
            assert!(
                read.iter().any(|k| k.kid == active.kid),
                "{} lost",
                active.kid
            );
        }
        let active = read
            .iter()
            .filter(|k| k.status == pricing_core::jws::KeyStatus::Active)
            .count();
        assert_eq!(active, 1);
    }

    #[test]
    fn a_missing_key_file_is_not_rotated_into_a_new_set() {
        let dir = tempfile::tempdir().unwrap();
        let err = rotate_signing_keys(dir.path()).unwrap_err();
        assert!(matches!(err, EmbeddedError::Missing { .. }), "{err}");
        assert!(
            read_signing_keys(dir.path()).unwrap().is_none(),
            "nothing made"
        );
        // On purpose: a new set, and only where there is none.
        let keys = new_signing_keys(dir.path()).unwrap();
        assert_eq!(keys.len(), 1);
        assert!(new_signing_keys(dir.path()).is_err());
        assert_eq!(rotate_signing_keys(dir.path()).unwrap().len(), 2);
    }

    #[test]
    fn a_rotation_removes_the_temporary_files_a_killed_one_left() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create_signing_keys(dir.path()).unwrap();
        let stale = dir.path().join(format!(".{SIGNING_KEYS_FILE}.1.aa.tmp"));
        let fresh = dir.path().join(format!(".{SIGNING_KEYS_FILE}.2.bb.tmp"));
        fs::write(&stale, b"[]").unwrap();
        fs::write(&fresh, b"[]").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        rotate_signing_keys(dir.path()).unwrap();
        assert!(!stale.exists(), "a minute old: removed");
        assert!(fresh.exists(), "maybe still being written: kept");
    }

    #[test]
    fn creates_the_signing_keys_once() {
        let dir = tempfile::tempdir().unwrap();
        let keys = load_or_create_signing_keys(dir.path()).unwrap();
        assert_eq!(keys.len(), 1);
        assert!(Signer::from_keys(&keys).is_ok());
        let again = load_or_create_signing_keys(dir.path()).unwrap();
        assert_eq!(again[0].kid, keys[0].kid);
        assert_eq!(again[0].pkcs8, keys[0].pkcs8);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join(SIGNING_KEYS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(SIGNING_KEYS_FILE)]);
    }

    #[test]
    fn creates_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b");
        load_or_create_signing_keys(&data).unwrap();
        assert!(data.join(SIGNING_KEYS_FILE).is_file());
    }

    #[test]
    fn refuses_a_broken_key_file() {
        let dir = tempfile::tempdir().unwrap();
        write_private_file(&dir.path().join(SIGNING_KEYS_FILE), b"[]").unwrap();
        let err = load_or_create_signing_keys(dir.path()).unwrap_err();
        assert!(matches!(err, EmbeddedError::Invalid { .. }), "{err}");
        write_private_file(&dir.path().join(SIGNING_KEYS_FILE), b"{").unwrap();
        assert!(load_or_create_signing_keys(dir.path()).is_err());
    }

    #[test]
    fn private_files_round_trip_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        assert_eq!(read_private_file(&path).unwrap(), None);
        write_private_file(&path, b"one").unwrap();
        write_private_file(&path, b"two").unwrap();
        assert_eq!(
            read_private_file(&path).unwrap().as_deref(),
            Some(&b"two"[..])
        );
        assert!(!create_private_file(&path, b"three").unwrap());
        assert_eq!(
            read_private_file(&path).unwrap().as_deref(),
            Some(&b"two"[..])
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn concurrent_creators_agree() {
        let dir = tempfile::tempdir().unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let d = dir.path().to_path_buf();
                std::thread::spawn(move || load_or_create_signing_keys(&d).unwrap())
            })
            .collect();
        let kids: HashSetOf = handles
            .into_iter()
            .map(|h| h.join().unwrap()[0].kid.clone())
            .collect();
        assert_eq!(kids.len(), 1);
    }

    type HashSetOf = std::collections::HashSet<String>;
}
