//! A SQLite VFS that can lose power: what was written but never synced is
//! undone, as a disk's volatile cache loses it.
//!
//! The VFS (registered once per process as [`VFS_NAME`]) wraps SQLite's default
//! VFS and forwards every call to the real files. Files under the root of a
//! [`Disk`] are tracked: for each file *path* (not handle: an fsync on any handle
//! makes every write of the file durable, as on Linux) the VFS keeps, for each
//! write and truncate since the file's last successful sync, what undoes it (the
//! bytes it covered and the size before) and what it did. Other files (temporary
//! files, files of other disks' tests) are only forwarded.
//!
//! [`Disk::cut`] switches the power off: from then on every write, truncate,
//! sync and delete of the disk's files fails with `SQLITE_IOERR`, so nothing
//! written after the cut reaches a file and no sync after it succeeds. The
//! switch is a write lock; a write holds it for reading while it runs, and a
//! sync while it decides, once the real sync returned, whether it counts. So
//! the cut is one instant for every file: a write before it reached its file
//! and one after it did not; a sync that returned before it made its file's
//! writes durable, and one still running (the cut lands in the middle of an
//! fsync) or started after it fails and made nothing durable. [`Disk::power_cycle`],
//! once every file is closed, undoes the unsynced writes of every file in
//! reverse order and, for [`Loss::Some`], writes back a random part of them (a
//! disk may have written any of its cached writes, in any order), then switches
//! the power on again.
//!
//! The shared-memory index (`-shm`, `xShmMap` and friends) is memory, not
//! storage: it is forwarded, and the caller deletes the `-shm` file after a
//! cut. Deleting a file while powered on is taken as durable (its unsynced
//! writes go with it); directory syncs are not modelled.
//!
//! A VFS is FFI and cannot do without unsafe code, which the rest of the
//! workspace forbids: this test-only crate alone allows it, and every unsafe
//! operation here says why it is sound. Nothing but tests depends on it.

use std::collections::HashMap;
use std::ffi::{CStr, OsStr, c_char, c_int, c_void};
use std::fs;
use std::io;
use std::mem::{self, size_of};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError, RwLock};

use rusqlite::ffi;

/// The name the VFS is registered under: what `OpenOptions::vfs` takes.
pub const VFS_NAME: &str = "agentmesh-powerloss";
const VFS_NAME_C: &CStr = c"agentmesh-powerloss";

/// Disk sectors, for [`Granularity::Sector`].
const SECTOR: u64 = 512;

/// The files under one directory, with one power switch.
pub struct Disk {
    state: Arc<DiskState>,
}

/// What survives of the writes a file had not synced when the power went.
pub enum Loss<'a> {
    /// Nothing: every file is as its last sync left it.
    All,
    /// A random part: `keep` is asked for each write (or each sector of one)
    /// and each truncate, in the order they were made, whether it reached the
    /// disk.
    Some {
        /// Whole writes, or the 512-byte sectors of each on their own.
        granularity: Granularity,
        /// Whether the next piece reached the disk.
        keep: &'a mut dyn FnMut() -> bool,
    },
}

/// How finely [`Loss::Some`] keeps writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// A write survives whole or not at all.
    Write,
    /// Each 512-byte sector a write covers survives on its own.
    Sector,
}

/// What a power cycle undid.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Writes and truncates that had not been synced.
    pub unsynced: usize,
    /// Their bytes.
    pub unsynced_bytes: u64,
    /// Pieces of them written back ([`Loss::Some`]).
    pub kept: usize,
}

impl Disk {
    /// Tracks the files under `root` (an existing directory), powered on.
    pub fn attach(root: &Path) -> io::Result<Disk> {
        register();
        // SQLite names files by their full, resolved path.
        let root = root.canonicalize()?;
        let mut disks = lock(&DISKS);
        if disks.iter().any(|d| d.root.starts_with(&root) || root.starts_with(&d.root)) {
            return Err(io::Error::other(format!("{} overlaps another disk", root.display())));
        }
        let state = Arc::new(DiskState {
            root,
            power: RwLock::new(true),
            files: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
        });
        disks.push(Arc::clone(&state));
        Ok(Disk { state })
    }

    /// Switches the power off: from then on every write, truncate, sync and
    /// delete fails, and so does a sync running now. Returns once no write is
    /// in flight.
    pub fn cut(&self) {
        *self.state.power.write().unwrap_or_else(PoisonError::into_inner) = false;
    }

    /// Whether the power is on.
    pub fn is_on(&self) -> bool {
        self.state.is_on()
    }

    /// Files of this disk SQLite holds open.
    pub fn open_files(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// After a [`Disk::cut`], with every file closed: undoes each file's
    /// unsynced writes, keeps what `loss` says survived, and switches the power
    /// on again.
    pub fn power_cycle(&self, loss: Loss<'_>) -> io::Result<Restored> {
        assert!(!self.is_on(), "power_cycle without a cut");
        let open = self.open_files();
        assert_eq!(open, 0, "{open} files of the disk are still open: close every connection first");
        let mut restored = Restored::default();
        let mut keep = match loss {
            Loss::All => None,
            Loss::Some { granularity, keep } => Some((granularity, keep)),
        };
        // Every file is closed, so nothing else touches the journals now. In
        // the order of their paths, so that a seed makes the same choices.
        let mut journals: Vec<_> = mem::take(&mut *lock(&self.state.files)).into_values().collect();
        journals.sort_by(|a, b| a.path.cmp(&b.path));
        for journal in journals {
            let pending = mem::take(&mut *lock(&journal.pending));
            if pending.is_empty() {
                continue;
            }
            let file = fs::OpenOptions::new().write(true).open(&journal.path)?;
            for change in pending.iter().rev() {
                change.undo(&file)?;
            }
            restored.unsynced += pending.len();
            restored.unsynced_bytes += pending.iter().map(Pending::bytes).sum::<u64>();
            if let Some((granularity, keep)) = &mut keep {
                for change in &pending {
                    restored.kept += change.redo_some(&file, *granularity, keep)?;
                }
            }
        }
        *self.state.power.write().unwrap_or_else(PoisonError::into_inner) = true;
        Ok(restored)
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        lock(&DISKS).retain(|d| !Arc::ptr_eq(d, &self.state));
    }
}

/// Every attached disk.
static DISKS: Mutex<Vec<Arc<DiskState>>> = Mutex::new(Vec::new());

struct DiskState {
    root: PathBuf,
    /// On: true. Held for reading by every write, truncate and delete while it
    /// runs, and by a sync while it decides whether it counts; [`Disk::cut`]
    /// takes it for writing.
    power: RwLock<bool>,
    /// The journals of the files opened since the last power cycle, by path.
    files: Mutex<HashMap<PathBuf, Arc<Journal>>>,
    /// Files of the disk SQLite holds open.
    open: AtomicUsize,
}

/// The disk a file at `path` is on, if any.
fn disk_of(path: &Path) -> Option<Arc<DiskState>> {
    lock(&DISKS).iter().find(|d| path.starts_with(&d.root)).cloned()
}

impl DiskState {
    /// The journal of the file at `path`, made on first use.
    fn journal(&self, path: &Path) -> Arc<Journal> {
        let mut files = lock(&self.files);
        let journal = files
            .entry(path.to_owned())
            .or_insert_with(|| Arc::new(Journal { path: path.to_owned(), pending: Mutex::new(Vec::new()) }));
        Arc::clone(journal)
    }

    fn is_on(&self) -> bool {
        *self.power.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `op` with the power on, holding the power switch so that a cut waits
    /// for it; `Err(())` when the power is off. The switch is taken last (a
    /// file's journal before it), so a cut never waits for a lock held by a
    /// call that waits for the switch.
    fn powered<T>(&self, op: impl FnOnce() -> T) -> Result<T, ()> {
        let power = self.power.read().unwrap_or_else(PoisonError::into_inner);
        if !*power {
            return Err(());
        }
        Ok(op())
    }
}

/// A file's writes and truncates since its last sync, oldest first.
struct Journal {
    path: PathBuf,
    pending: Mutex<Vec<Pending>>,
}

/// One unsynced change of a file.
struct Pending {
    /// The file's size before the change.
    size_before: u64,
    /// Where the change starts: the write's offset, the truncation's new size.
    at: u64,
    /// The bytes the change overwrote or cut off (those within the old size).
    old: Vec<u8>,
    change: Change,
}

enum Change {
    /// These bytes written at `at`.
    Write(Vec<u8>),
    /// The file cut (or extended) to `at` bytes.
    Truncate,
}

impl Pending {
    /// Puts the file back as it was before the change.
    fn undo(&self, file: &fs::File) -> io::Result<()> {
        file.set_len(self.size_before)?;
        file.write_all_at(&self.old, self.at)
    }

    fn bytes(&self) -> u64 {
        match &self.change {
            Change::Write(data) => data.len() as u64,
            Change::Truncate => self.old.len() as u64,
        }
    }

    /// Makes the change again, or those of its pieces `keep` says reached the
    /// disk; returns how many pieces were written.
    fn redo_some(
        &self,
        file: &fs::File,
        granularity: Granularity,
        keep: &mut dyn FnMut() -> bool,
    ) -> io::Result<usize> {
        match &self.change {
            Change::Truncate => {
                if !keep() {
                    return Ok(0);
                }
                file.set_len(self.at)?;
                Ok(1)
            }
            Change::Write(data) => {
                let mut kept = 0;
                let mut start = 0;
                while start < data.len() {
                    let offset = self.at + start as u64;
                    let end = match granularity {
                        Granularity::Write => data.len(),
                        Granularity::Sector => {
                            let to_boundary = (SECTOR - offset % SECTOR) as usize;
                            data.len().min(start + to_boundary)
                        }
                    };
                    if keep() {
                        file.write_all_at(&data[start..end], offset)?;
                        kept += 1;
                    }
                    start = end;
                }
                Ok(kept)
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers the VFS, once per process.
fn register() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS, which SQLite
        // keeps for the life of the process (it is never unregistered here).
        let real = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
        assert!(!real.is_null(), "SQLite has no default VFS");
        // SAFETY: `real` points to a registered VFS, which SQLite never frees.
        let (real_size, max_path) = unsafe { ((*real).szOsFile, (*real).mxPathname) };
        let vfs = Box::new(ffi::sqlite3_vfs {
            // Version 2: up to xCurrentTimeInt64; no system-call overrides.
            iVersion: 2,
            // Our `File` followed by the real VFS's file (see `File::real`).
            szOsFile: c_int::try_from(size_of::<File>()).expect("a small struct") + real_size,
            mxPathname: max_path,
            pNext: ptr::null_mut(),
            zName: VFS_NAME_C.as_ptr(),
            pAppData: real.cast(),
            xOpen: Some(x_open),
            xDelete: Some(x_delete),
            xAccess: Some(x_access),
            xFullPathname: Some(x_full_pathname),
            xDlOpen: Some(x_dl_open),
            xDlError: Some(x_dl_error),
            xDlSym: Some(x_dl_sym),
            xDlClose: Some(x_dl_close),
            xRandomness: Some(x_randomness),
            xSleep: Some(x_sleep),
            xCurrentTime: Some(x_current_time),
            xGetLastError: Some(x_get_last_error),
            xCurrentTimeInt64: Some(x_current_time_int64),
            xSetSystemCall: None,
            xGetSystemCall: None,
            xNextSystemCall: None,
        });
        // SAFETY: SQLite keeps the pointer for the life of the process, so the
        // box is leaked on purpose; its name is a static string and every method
        // it names is defined below.
        let rc = unsafe { ffi::sqlite3_vfs_register(Box::into_raw(vfs), 0) };
        assert_eq!(rc, ffi::SQLITE_OK, "registering the {VFS_NAME} VFS");
    });
}

/// The methods of every file the VFS opens. Version 2: shared memory, but no
/// memory-mapped reads (`xFetch`), so that every read goes through `xRead`.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// An open file, as SQLite allocates it: `szOsFile` bytes, this struct first
/// and the real VFS's file right after it.
#[repr(C)]
struct File {
    /// What SQLite sees (`sqlite3_file` must come first).
    base: ffi::sqlite3_file,
    /// The real VFS's file: the bytes right after this struct.
    real: *mut ffi::sqlite3_file,
    /// `None` for a file on no disk (or a temporary one): only forwarded.
    tracked: Option<Tracked>,
}

struct Tracked {
    disk: Arc<DiskState>,
    journal: Arc<Journal>,
}

/// The default VFS a call on our VFS forwards to.
///
/// # Safety
/// `vfs` is our registered VFS, whose `pAppData` is the default VFS.
unsafe fn real_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: per the contract, `vfs` is valid and set up by `register`.
    unsafe { (*vfs).pAppData.cast() }
}

/// Our part of a file SQLite opened through [`x_open`].
///
/// # Safety
/// `file` was opened by [`x_open`] successfully and is not closed yet. SQLite
/// calls a file's methods from one thread at a time and our fields are not
/// written between `x_open` and `x_close`, so a shared reference is sound.
unsafe fn ours<'a>(file: *mut ffi::sqlite3_file) -> &'a File {
    // SAFETY: per the contract, `file` points to an initialised `File`.
    unsafe { &*file.cast::<File>() }
}

/// The methods of the real file `real`.
///
/// # Safety
/// `real` is a file the real VFS opened successfully and has not closed.
unsafe fn real_methods<'a>(real: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: an open file's `pMethods` points to its VFS's static methods.
    unsafe { &*(*real).pMethods }
}

/// Calls method `$name` of the real file under `$file` with the remaining
/// arguments. Must be used inside an `unsafe` block whose caller guarantees
/// that `$file` was opened by [`x_open`] and is still open.
macro_rules! forward {
    ($file:expr, $name:ident $(, $arg:expr)*) => {{
        let real = ours($file).real;
        match real_methods(real).$name {
            Some(method) => method(real $(, $arg)*),
            None => ffi::SQLITE_MISUSE,
        }
    }};
}

/// The path SQLite names a file by, if it gave one.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string that outlives the call.
unsafe fn path_of<'a>(name: *const c_char) -> Option<&'a Path> {
    if name.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    Some(Path::new(OsStr::from_bytes(bytes)))
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands `file` with `szOsFile` bytes (our size), aligned for
    // any `sqlite3_file`; the real file lives right after our struct, whose
    // size is a multiple of its (pointer) alignment. `name` is what SQLite
    // passes to the real VFS as well. On failure the real VFS leaves its
    // `pMethods` NULL (SQLite asserts this), and so do we, so SQLite will not
    // call `x_close`; on success our struct is written in full before SQLite
    // can call any method.
    unsafe {
        let real = file.cast::<u8>().add(size_of::<File>()).cast::<ffi::sqlite3_file>();
        let real_vfs = real_vfs(vfs);
        let Some(open) = (*real_vfs).xOpen else { return ffi::SQLITE_MISUSE };
        let rc = open(real_vfs, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            (*file).pMethods = ptr::null();
            return rc;
        }
        let temporary = flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0;
        let tracked = path_of(name).filter(|_| !temporary).and_then(|path| {
            let disk = disk_of(path)?;
            disk.open.fetch_add(1, Ordering::SeqCst);
            let journal = disk.journal(path);
            Some(Tracked { disk, journal })
        });
        ptr::write(
            file.cast::<File>(),
            File { base: ffi::sqlite3_file { pMethods: &METHODS }, real, tracked },
        );
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file opened by `x_open` once; our struct is moved
    // out (and dropped below) and never read again, since SQLite clears
    // `pMethods` after `xClose`.
    unsafe {
        let File { real, tracked, .. } = ptr::read(file.cast::<File>());
        let rc = match real_methods(real).xClose {
            Some(close) => close(real),
            None => ffi::SQLITE_OK,
        };
        if let Some(tracked) = tracked {
            tracked.disk.open.fetch_sub(1, Ordering::SeqCst);
        }
        rc
    }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite calls this on a file opened by `x_open` (as for every
    // method below); the arguments go on unchanged.
    unsafe { forward!(file, xRead, buf, amount, offset) }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: as for `x_read`. `buf` holds `amount` bytes (SQLite's contract).
    unsafe {
        let Some(tracked) = &ours(file).tracked else { return forward!(file, xWrite, buf, amount, offset) };
        let mut pending = lock(&tracked.journal.pending);
        let written = tracked.disk.powered(|| {
            let (Ok(at), Ok(len)) = (u64::try_from(offset), usize::try_from(amount)) else {
                return ffi::SQLITE_IOERR_WRITE;
            };
            let (size_before, old) = match covered(file, at, len as u64) {
                Ok(before) => before,
                Err(rc) => return rc,
            };
            let data = if len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(buf.cast::<u8>(), len).to_vec()
            };
            pending.push(Pending { size_before, at, old, change: Change::Write(data) });
            forward!(file, xWrite, buf, amount, offset)
        });
        written.unwrap_or(ffi::SQLITE_IOERR_WRITE)
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe {
        let Some(tracked) = &ours(file).tracked else { return forward!(file, xTruncate, size) };
        let mut pending = lock(&tracked.journal.pending);
        let truncated = tracked.disk.powered(|| {
            let Ok(new_size) = u64::try_from(size) else { return ffi::SQLITE_IOERR_TRUNCATE };
            let (size_before, old) = match covered(file, new_size, u64::MAX - new_size) {
                Ok(before) => before,
                Err(rc) => return rc,
            };
            pending.push(Pending { size_before, at: new_size, old, change: Change::Truncate });
            forward!(file, xTruncate, size)
        });
        truncated.unwrap_or(ffi::SQLITE_IOERR_TRUNCATE)
    }
}

/// The file's size and its bytes in `at..at + len` that lie within it: what a
/// change of that range must put back.
///
/// # Safety
/// `file` was opened by [`x_open`] and is still open.
unsafe fn covered(file: *mut ffi::sqlite3_file, at: u64, len: u64) -> Result<(u64, Vec<u8>), c_int> {
    // SAFETY: per the contract; the buffer read into holds exactly the bytes
    // asked for, all within the file, so the read is never short.
    unsafe {
        let mut size: i64 = 0;
        let rc = forward!(file, xFileSize, &mut size);
        if rc != ffi::SQLITE_OK {
            return Err(rc);
        }
        let Ok(size) = u64::try_from(size) else { return Err(ffi::SQLITE_IOERR_FSTAT) };
        let end = size.min(at.saturating_add(len));
        let mut old = vec![0u8; end.saturating_sub(at) as usize];
        if !old.is_empty() {
            let (Ok(amount), Ok(offset)) = (c_int::try_from(old.len()), i64::try_from(at)) else {
                return Err(ffi::SQLITE_IOERR_READ);
            };
            let rc = forward!(file, xRead, old.as_mut_ptr().cast(), amount, offset);
            if rc != ffi::SQLITE_OK {
                return Err(rc);
            }
        }
        Ok((size, old))
    }
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe {
        let Some(tracked) = &ours(file).tracked else { return forward!(file, xSync, flags) };
        // Held across the sync: a write of the file on another handle waits, so
        // it is either synced here or kept for the next sync.
        let mut pending = lock(&tracked.journal.pending);
        if !tracked.disk.is_on() {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        // The power switch is not held during the sync itself: a cut while it
        // runs makes it fail and leaves its writes unsynced, as a power loss
        // during an fsync may. It counts only if the power is still on when it
        // returns, and a cut waits for that check and what follows.
        let rc = forward!(file, xSync, flags);
        let synced = tracked.disk.powered(|| {
            if rc == ffi::SQLITE_OK {
                pending.clear();
            }
            rc
        });
        synced.unwrap_or(ffi::SQLITE_IOERR_FSYNC)
    }
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xFileSize, size) }
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xLock, level) }
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xUnlock, level) }
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xCheckReservedLock, out) }
}

unsafe extern "C" fn x_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xFileControl, op, arg) }
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xSectorSize) }
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xDeviceCharacteristics) }
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xShmMap, region, size, extend, out) }
}

unsafe extern "C" fn x_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xShmLock, offset, n, flags) }
}

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: as for `x_read`.
    unsafe {
        let real = ours(file).real;
        if let Some(barrier) = real_methods(real).xShmBarrier {
            barrier(real);
        }
    }
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: as for `x_read`.
    unsafe { forward!(file, xShmUnmap, delete) }
}

// The VFS's own methods call the default VFS's with the default VFS as their
// first argument (the unix VFS reads its `pAppData`).

unsafe extern "C" fn x_delete(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    // SAFETY: `vfs` is ours and `name` a path SQLite passes on unchanged.
    unsafe {
        let real = real_vfs(vfs);
        let Some(delete) = (*real).xDelete else { return ffi::SQLITE_MISUSE };
        let Some(disk) = path_of(name).and_then(disk_of) else { return delete(real, name, sync_dir) };
        let deleted = disk.powered(|| {
            let rc = delete(real, name, sync_dir);
            if rc == ffi::SQLITE_OK
                && let Some(path) = path_of(name)
            {
                lock(&disk.files).remove(path);
            }
            rc
        });
        deleted.unwrap_or(ffi::SQLITE_IOERR_DELETE)
    }
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    // SAFETY: forwarded unchanged to the default VFS (as for every method below).
    unsafe {
        let real = real_vfs(vfs);
        (*real).xAccess.map_or(ffi::SQLITE_MISUSE, |access| access(real, name, flags, out))
    }
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    size: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xFullPathname.map_or(ffi::SQLITE_MISUSE, |full| full(real, name, size, out))
    }
}

unsafe extern "C" fn x_dl_open(vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xDlOpen.map_or(ptr::null_mut(), |open| open(real, name))
    }
}

unsafe extern "C" fn x_dl_error(vfs: *mut ffi::sqlite3_vfs, size: c_int, out: *mut c_char) {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        if let Some(error) = (*real).xDlError {
            error(real, size, out);
        }
    }
}

type DlSymbol = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char);

unsafe extern "C" fn x_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    handle: *mut c_void,
    symbol: *const c_char,
) -> Option<DlSymbol> {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xDlSym.and_then(|sym| sym(real, handle, symbol))
    }
}

unsafe extern "C" fn x_dl_close(vfs: *mut ffi::sqlite3_vfs, handle: *mut c_void) {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        if let Some(close) = (*real).xDlClose {
            close(real, handle);
        }
    }
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, size: c_int, out: *mut c_char) -> c_int {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xRandomness.map_or(0, |randomness| randomness(real, size, out))
    }
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xSleep.map_or(0, |sleep| sleep(real, micros))
    }
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xCurrentTime.map_or(ffi::SQLITE_ERROR, |now| now(real, out))
    }
}

unsafe extern "C" fn x_get_last_error(vfs: *mut ffi::sqlite3_vfs, size: c_int, out: *mut c_char) -> c_int {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xGetLastError.map_or(0, |last| last(real, size, out))
    }
}

unsafe extern "C" fn x_current_time_int64(vfs: *mut ffi::sqlite3_vfs, out: *mut i64) -> c_int {
    // SAFETY: as for `x_access`.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xCurrentTimeInt64.map_or(ffi::SQLITE_ERROR, |now| now(real, out))
    }
}
