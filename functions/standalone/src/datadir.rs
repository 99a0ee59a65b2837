//! The data directory: database, signing keys, the token secret and local OAuth clients.
//! Every secret file is written with mode 0600 and never logged.

use std::path::{Path, PathBuf};

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use pricing_api::auth::LocalTokens;
use pricing_embedded::EmbeddedError;
use pricing_embedded::keys::{load_or_create_private_file, read_private_file, write_private_file};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::cli::TokenArgs;

const TOKEN_SECRET_FILE: &str = "token-secret";
const CLIENTS_FILE: &str = "clients.json";
/// The client a first start created, until its secret was shown (see
/// [`Clients::load_or_create`]).
const UNSHOWN_CLIENTS_FILE: &str = "clients.json.unshown";
/// Tenant of the client created on first start.
pub const LOCAL_TENANT: &str = "local";

/// The file `serve` locks in its data directory.
pub const LOCK_FILE: &str = "serve.lock";

/// Takes the data directory for this process: one `serve` per directory. Its caches (the
/// records it read, the instances with work queued) and its release of work in flight at
/// start assume it is the database's only writer; a second `serve` on the same directory
/// (a restart that overlaps the old process) would take the first one's work and serve
/// records the first one changed. The lock is held while the returned files are open, and
/// the system drops it when the process ends, however it ends.
///
/// Two locks: the directory itself, which no file operation in it can undo (an operator
/// deleting `serve.lock`, left behind after a stop and looking stale, let a second `serve`
/// start), and `serve.lock`, which builds from before the directory lock take.
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock, Error> {
    let directory = std::fs::File::open(dir).map_err(|source| Error::DataDir {
        path: dir.display().to_string(),
        source,
    })?;
    let directory = take(directory, dir, dir)?;
    let file = lock_file(dir)?;
    Ok(DataDirLock {
        _directory: directory,
        _file: file,
    })
}

/// Holds the data directory while a command reads its database (`simulate log`): a shared
/// lock on the directory, so that no `serve` starts and writes under the reader meanwhile
/// (it would refuse, as beside another `serve`), while other readers may hold it too.
/// `None` when a `serve` has it (the reader then reads through its live log) or when the
/// directory cannot be locked. Nothing is created.
pub fn hold_for_reading(dir: &Path) -> Option<std::fs::File> {
    let directory = std::fs::File::open(dir).ok()?;
    directory.try_lock_shared().ok()?;
    Some(directory)
}

/// The locks [`lock_data_dir`] holds, until dropped.
#[derive(Debug)]
pub struct DataDirLock {
    _directory: std::fs::File,
    _file: std::fs::File,
}

fn lock_file(dir: &Path) -> Result<std::fs::File, Error> {
    let path = dir.join(LOCK_FILE);
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    // Private like every other file of the directory (it holds nothing, but an operator
    // auditing the modes should not have to know that).
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(&path).map_err(|source| Error::DataDir {
        path: path.display().to_string(),
        source,
    })?;
    take(file, &path, dir)
}

/// Locks `file` (at `path`) for the data directory `dir`.
fn take(file: std::fs::File, path: &Path, dir: &Path) -> Result<std::fs::File, Error> {
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Setup(format!(
            "another `serve` is running on the data directory {}: one process per data directory",
            dir.display()
        ))),
        // A file system without locks (some network ones): run unguarded rather than not
        // at all, and say so.
        Err(std::fs::TryLockError::Error(e)) => {
            tracing::warn!(path = %path.display(), error = %e,
                "cannot lock the data directory: make sure no other `serve` uses it");
            Ok(file)
        }
    }
}

/// Creates the data directory (mode 0700) when it is missing. An existing directory is left
/// as it is: its owner chose its mode (a shared parent, a mounted volume); the files in it
/// that matter are private on their own (0600).
pub fn ensure_dir(dir: &Path) -> Result<(), Error> {
    let failed = |source| Error::DataDir {
        path: dir.display().to_string(),
        source,
    };
    if dir.is_dir() {
        return Ok(());
    }
    // A file where the directory (or one of its parents) should be: said as such (it was
    // "File exists").
    if let Some(file) = dir.ancestors().find(|a| a.exists() && !a.is_dir()) {
        return Err(Error::Setup(format!(
            "data directory {}: {} is a file, not a directory",
            dir.display(),
            file.display()
        )));
    }
    // Parents as the umask makes them; only the data directory itself is private.
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    match builder.create(dir) {
        Ok(()) => Ok(()),
        // Created meanwhile (`serve` and `token` racing on a fresh directory).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

/// The SQLite files of a database: the file itself, then its write-ahead log and shared
/// memory index.
fn database_files(db: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [db.to_path_buf(), with("-wal"), with("-shm")]
}

/// Refuses a data directory whose database holds data but whose signing keys are gone (a
/// restore that missed the file, a hand that deleted it): a start would make a new key
/// set, and no entry of the log, each stored signed by a key of the old set, would verify
/// against the keys the service publishes. A first start makes the keys before the
/// database, so a missing or empty database is a first start; a file that is not one of
/// ours (not SQLite, or no schema version of ours) is left to the store's own refusal,
/// which names what it is.
pub fn signing_keys_kept(dir: &Path, db: &Path) -> Result<(), Error> {
    let keys = dir.join(pricing_embedded::keys::SIGNING_KEYS_FILE);
    if !keys.exists() && holds_pricing_data(db) {
        return Err(Error::Setup(format!(
            "{} is missing, but {} is this service's database: the entries in it are signed \
             by the keys that file held, and would no longer verify. Restore it from a \
             backup; to go on with new keys instead (what was signed before will not \
             verify), run `standalone rotate-keys --new-key-set --data {}` first",
            keys.display(),
            db.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Whether `db` is a SQLite file with a schema version (`PRAGMA user_version`, bytes 60 to
/// 63 of the header) or with a write-ahead log holding changes not yet copied into it.
fn holds_pricing_data(db: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 64];
    let read = std::fs::File::open(db).and_then(|mut f| f.read_exact(&mut header));
    if read.is_err() || !header.starts_with(b"SQLite format 3\0") {
        return false;
    }
    let version = u32::from_be_bytes([header[60], header[61], header[62], header[63]]);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    version > 0 || std::fs::metadata(wal).is_ok_and(|m| m.len() > 0)
}

/// Makes the database private before it is opened: creates an empty `db` with mode 0600 if
/// it is missing (SQLite gives its -wal and -shm files the mode of the database file), and
/// sets 0600 on the database files that exist (made by an earlier version, or copied in).
pub fn private_database(db: &Path) -> Result<(), Error> {
    let failed = |path: &Path| {
        let path = path.display().to_string();
        move |source| Error::DataDir { path, source }
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(db).map_err(failed(db))?;
    restrict_database(db)
}

/// Sets mode 0600 on the database files that exist and are readable or writable by others.
pub fn restrict_database(db: &Path) -> Result<(), Error> {
    #[cfg(unix)]
    for path in database_files(db) {
        use std::os::unix::fs::PermissionsExt;
        let failed = |source| Error::DataDir {
            path: path.display().to_string(),
            source,
        };
        let mode = match std::fs::metadata(&path) {
            Ok(m) => m.permissions().mode(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(failed(e)),
        };
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(failed)?;
        }
    }
    #[cfg(not(unix))]
    let _ = database_files(db);
    Ok(())
}

fn random_bytes(n: usize) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| Error::Setup("the system random source failed".into()))?;
    Ok(buf)
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Setup(format!("{what}: {e}"))
}

/// Bytes of the HS256 secret of standalone tokens (the length of SHA-256, RFC 7518 section
/// 3.2's least for HS256).
const TOKEN_SECRET_BYTES: usize = 32;

/// The HS256 secret of standalone tokens: created once (also when `serve` and `token` race
/// on a fresh directory), kept across restarts. A file that holds fewer than 32 bytes is
/// refused as damaged: it is written whole, atomically, so a shorter one was cut or
/// replaced, and an empty key lets anyone sign a token for any tenant (an outside review:
/// an empty `token-secret` started, and tokens signed with the empty key were accepted).
pub fn token_secret(dir: &Path) -> Result<Vec<u8>, Error> {
    let path = dir.join(TOKEN_SECRET_FILE);
    let (bytes, _) = load_or_create_private_file(&path, || {
        let secret = random_bytes(TOKEN_SECRET_BYTES).map_err(|e| EmbeddedError::Invalid {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        Ok(B64.encode(secret).into_bytes())
    })
    .map_err(setup("the token secret"))?;
    let damaged = |what: String| {
        Error::Setup(format!(
            "the token secret file is damaged: {} {what} (remove it to make a new one: every token issued so far is then refused)",
            path.display()
        ))
    };
    let secret = B64
        .decode(bytes.trim_ascii())
        .map_err(|e| damaged(format!("is not base64 ({e})")))?;
    if secret.len() < TOKEN_SECRET_BYTES {
        return Err(damaged(format!(
            "holds {} bytes, at least {TOKEN_SECRET_BYTES} expected",
            secret.len()
        )));
    }
    Ok(secret)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Client {
    client_id: String,
    /// SHA-256 of the secret, base64url; the secret itself is shown once and not kept.
    secret_sha256: String,
    tenant: String,
}

/// OAuth clients allowed to use `POST /oauth2/token`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Clients {
    clients: Vec<Client>,
}

fn hash_secret(secret: &str) -> String {
    B64.encode(digest(&SHA256, secret.as_bytes()).as_ref())
}

/// A client created now; its secret is printed once.
pub struct NewClient {
    pub client_id: String,
    pub client_secret: String,
    pub tenant: String,
}

impl Clients {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CLIENTS_FILE)
    }

    /// Where a first start keeps the client it created until its secret has been shown.
    fn unshown_path(dir: &Path) -> PathBuf {
        dir.join(UNSHOWN_CLIENTS_FILE)
    }

    /// Loads the clients; on the first start creates the local client and returns it. The
    /// new client is written beside the clients file ([`UNSHOWN_CLIENTS_FILE`]) and becomes
    /// it with [`Clients::keep_new`] once its secret is shown: a start stopped before that
    /// (a port taken, a SIGTERM in its first milliseconds, a kill) leaves no client whose
    /// secret nobody saw, and the next start makes and shows one (an outside review: 3 of
    /// 12 starts stopped ~40 ms in kept an unusable client).
    pub fn load_or_create(dir: &Path) -> Result<(Clients, Option<NewClient>), Error> {
        let path = Self::path(dir);
        if let Some(bytes) = read_private_file(&path).map_err(setup("the clients file"))? {
            let clients =
                serde_json::from_slice(&bytes).map_err(setup("the clients file is damaged"))?;
            return Ok((clients, None));
        }
        let client = NewClient {
            client_id: format!("local-{}", B64.encode(random_bytes(6)?)),
            client_secret: B64.encode(random_bytes(24)?),
            tenant: LOCAL_TENANT.into(),
        };
        let clients = Clients {
            clients: vec![Client {
                client_id: client.client_id.clone(),
                secret_sha256: hash_secret(&client.client_secret),
                tenant: client.tenant.clone(),
            }],
        };
        let bytes = serde_json::to_vec_pretty(&clients).map_err(setup("the clients file"))?;
        write_private_file(&Self::unshown_path(dir), &bytes).map_err(setup("the clients file"))?;
        Ok((clients, Some(client)))
    }

    /// Keeps the client [`Clients::load_or_create`] created, once its secret was shown: the
    /// rename is synced, so the secret the operator noted survives a crash.
    pub fn keep_new(dir: &Path) -> Result<(), Error> {
        let path = Self::path(dir);
        let failed = |source| Error::DataDir {
            path: path.display().to_string(),
            source,
        };
        std::fs::rename(Self::unshown_path(dir), &path).map_err(failed)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(failed)
    }

    /// Forgets the client [`Clients::load_or_create`] created, its secret never shown.
    pub fn forget_new(dir: &Path) {
        let pending = Self::unshown_path(dir);
        if let Err(e) = std::fs::remove_file(&pending)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %pending.display(), error = %e, "could not remove the unshown OAuth client");
        }
    }

    /// The tenant of a client whose secret matches.
    pub fn authenticate(&self, client_id: &str, secret: &str) -> Option<&str> {
        let offered = hash_secret(secret);
        self.clients
            .iter()
            .find(|c| c.client_id == client_id)
            .filter(|c| constant_time_eq(c.secret_sha256.as_bytes(), offered.as_bytes()))
            .map(|c| c.tenant.as_str())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `standalone token`: prints a token for a tenant as the last line of stdout.
pub fn print_token(args: &TokenArgs) -> Result<(), Error> {
    if pricing_core::ids::TenantId::from_claim(&args.tenant).is_none() {
        return Err(Error::Setup(
            "--tenant must be 1 to 256 bytes (UTF-8)".into(),
        ));
    }
    // A token may come before the first `serve` (the directory is then made), but a
    // mistyped --data would make a secret no service uses: said on stderr (stdout's last
    // line stays the token).
    let new = !args.data.exists();
    ensure_dir(&args.data)?;
    let tokens = LocalTokens::new(&token_secret(&args.data)?);
    let token = tokens
        .issue(&args.tenant, args.ttl)
        .map_err(setup("signing the token"))?;
    if new {
        eprintln!(
            "note: created the data directory {} and its token secret: only a service on this directory accepts the token",
            args.data.display()
        );
    }
    crate::write_stdout(&format!("{token}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_without_its_signing_keys_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("pricing.db");
        // A first start: no database, or the empty one a start that stopped left.
        assert!(signing_keys_kept(dir.path(), &db).is_ok());
        std::fs::write(&db, b"").unwrap();
        assert!(signing_keys_kept(dir.path(), &db).is_ok());
        // Not ours (not SQLite; SQLite without a schema version): the store says what
        // it is.
        std::fs::write(&db, [7u8; 100]).unwrap();
        assert!(signing_keys_kept(dir.path(), &db).is_ok());
        let mut header = b"SQLite format 3\0".to_vec();
        header.resize(100, 0);
        std::fs::write(&db, &header).unwrap();
        assert!(signing_keys_kept(dir.path(), &db).is_ok());
        // A database of ours.
        std::fs::remove_file(&db).unwrap();
        drop(pricing_embedded::EmbeddedStore::open(&db).unwrap());
        let e = signing_keys_kept(dir.path(), &db).expect_err("the keys are gone");
        let message = e.to_string();
        assert!(
            message.contains("signing-keys.json is missing"),
            "{message}"
        );
        assert!(message.contains("rotate-keys --new-key-set"), "{message}");
        pricing_embedded::keys::load_or_create_signing_keys(dir.path()).unwrap();
        assert!(signing_keys_kept(dir.path(), &db).is_ok());
    }

    /// One `serve` per data directory: a second one is refused with a message that says
    /// why, and the directory is free again once the first lets go.
    #[test]
    fn a_data_directory_is_taken_by_one_serve() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_data_dir(dir.path()).expect("the first takes it");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(LOCK_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "private like the other files");
        }
        let second = lock_data_dir(dir.path()).expect_err("a second is refused");
        assert!(
            second.to_string().contains("another `serve` is running"),
            "{second}"
        );
        // Deleting the lock file (left behind after a stop, it looks stale) does not free
        // the directory.
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        let third = lock_data_dir(dir.path()).expect_err("still refused");
        assert!(
            third.to_string().contains("another `serve` is running"),
            "{third}"
        );
        // A reader (`simulate log`) gets no hold while a `serve` has the directory.
        assert!(hold_for_reading(dir.path()).is_none());
        drop(first);
        lock_data_dir(dir.path()).expect("free again");
    }

    /// Readers hold the data directory together, and no `serve` starts while one does.
    #[test]
    fn readers_hold_the_data_directory_against_a_serve() {
        let dir = tempfile::tempdir().unwrap();
        let one = hold_for_reading(dir.path()).expect("free");
        let two = hold_for_reading(dir.path()).expect("shared");
        let refused = lock_data_dir(dir.path()).expect_err("a serve waits for the readers");
        assert!(
            refused.to_string().contains("another `serve` is running"),
            "{refused}"
        );
        drop((one, two));
        lock_data_dir(dir.path()).expect("free again");
        assert!(
            std::fs::read_dir(dir.path())
                .unwrap()
                .all(|e| { e.unwrap().file_name() == LOCK_FILE }),
            "a reader creates nothing"
        );
    }

    #[test]
    fn clients_are_created_once_and_secrets_are_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let (clients, created) = Clients::load_or_create(dir.path()).unwrap();
        let created = created.expect("first start creates a client");
        assert_eq!(
            clients.authenticate(&created.client_id, &created.client_secret),
            Some(LOCAL_TENANT)
        );
        assert_eq!(clients.authenticate(&created.client_id, "wrong"), None);
        // Kept only once shown: a start stopped before that makes a new one next time.
        assert!(!dir.path().join(CLIENTS_FILE).exists());
        let (_, remade) = Clients::load_or_create(dir.path()).unwrap();
        let remade = remade.expect("an unshown client is made again");
        assert_ne!(remade.client_id, created.client_id);
        Clients::keep_new(dir.path()).unwrap();
        assert!(!dir.path().join(UNSHOWN_CLIENTS_FILE).exists());
        let stored = std::fs::read_to_string(dir.path().join(CLIENTS_FILE)).unwrap();
        assert!(!stored.contains(&remade.client_secret));
        let (clients, again) = Clients::load_or_create(dir.path()).unwrap();
        assert!(again.is_none());
        assert_eq!(
            clients.authenticate(&remade.client_id, &remade.client_secret),
            Some(LOCAL_TENANT)
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(CLIENTS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[cfg(unix)]
    #[test]
    fn a_missing_data_directory_is_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b/data");
        ensure_dir(&data).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_ne!(
            mode(&dir.path().join("a")),
            0o700,
            "parents as the umask makes them"
        );
        ensure_dir(&data).unwrap();
    }

    /// Issue 9, item 11: `serve --data DIR` on an existing directory set its mode to 0700.
    #[cfg(unix)]
    #[test]
    fn an_existing_data_directory_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("shared");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_dir(&data).unwrap();
        assert_eq!(mode(&data), 0o755);
    }

    #[test]
    fn a_data_path_that_is_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(ensure_dir(&file).is_err());
    }

    /// Issue 9, item 11: the database was created with the umask's mode (0644: readable by
    /// every local user), and so were its -wal and -shm files.
    #[cfg(unix)]
    #[test]
    fn the_database_and_its_wal_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("pricing.db");
        private_database(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        let store = pricing_embedded::EmbeddedStore::open(&db).unwrap();
        for path in database_files(&db) {
            assert!(path.exists(), "{} exists in WAL mode", path.display());
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        drop(store);
        // Files made readable by an earlier version are made private again.
        for path in database_files(&db) {
            if path.exists() {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        private_database(&db).unwrap();
        for path in database_files(&db) {
            if path.exists() {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
            }
        }
    }

    #[test]
    fn concurrent_first_starts_agree_on_the_token_secret() {
        // `serve` and `token` on a fresh directory at the same moment must not end up with
        // different secrets (tokens of one would be refused by the other).
        let dir = tempfile::tempdir().unwrap();
        let secrets: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| token_secret(dir.path()).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(secrets.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(secrets[0], token_secret(dir.path()).unwrap());
    }

    #[test]
    fn the_token_secret_survives_restarts() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            token_secret(dir.path()).unwrap(),
            token_secret(dir.path()).unwrap()
        );
    }

    #[test]
    fn a_file_where_the_data_directory_should_be_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("afile");
        std::fs::write(&file, "x").unwrap();
        for path in [file.clone(), file.join("sub")] {
            let e = ensure_dir(&path).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{} is a file, not a directory", file.display())),
                "{e}"
            );
        }
    }

    #[test]
    fn a_short_or_empty_token_secret_is_refused_not_used() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(token_secret(dir.path()).unwrap().len(), 32);
        let path = dir.path().join(TOKEN_SECRET_FILE);
        // Empty, a newline, 3 zero bytes, 31 bytes: each would sign tokens anyone can make
        // (or guess) for any tenant.
        // Not base64 at all, or cut to a length base64 cannot have: named the same way.
        for content in [
            "",
            "\n",
            "AAAA",
            &B64.encode([7u8; 31]),
            "not base64 at all!!",
            "short",
        ] {
            std::fs::write(&path, content).unwrap();
            let e = token_secret(dir.path()).unwrap_err().to_string();
            assert!(
                e.contains("the token secret file is damaged")
                    && e.contains(&path.display().to_string()),
                "{content:?}: {e}"
            );
        }
        std::fs::write(&path, B64.encode([7u8; 32])).unwrap();
        assert_eq!(token_secret(dir.path()).unwrap(), vec![7u8; 32]);
    }
}
