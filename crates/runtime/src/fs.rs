//! Real files for the kernel's `Storage`, and the data directory's identity and lock.
//!
//! Durability rules: appends are made durable by `sync` (fdatasync); whole-file replacements
//! write a temporary file, fsync it, rename it over the target and fsync the directory, so a
//! crash leaves either the old or the new file.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use tern_kernel::io::Storage;

pub struct FsStorage {
    root: PathBuf,
    open: HashMap<String, File>,
}

impl FsStorage {
    pub fn new(root: &Path) -> FsStorage {
        FsStorage { root: root.to_path_buf(), open: HashMap::new() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn sync_dir(dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl Storage for FsStorage {
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        if !self.open.contains_key(name) {
            let p = self.path(name);
            let dir = p.parent().expect("files live in the data directory").to_path_buf();
            let created = !p.exists();
            fs::create_dir_all(&dir)?;
            let f = OpenOptions::new().create(true).append(true).open(&p)?;
            if created {
                Self::sync_dir(&dir)?;
            }
            self.open.insert(name.to_string(), f);
        }
        self.open.get_mut(name).expect("opened").write_all(bytes)
    }

    fn sync(&mut self, name: &str) -> io::Result<()> {
        match self.open.get(name) {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let p = self.path(name);
        let dir = p.parent().expect("files live in the data directory").to_path_buf();
        fs::create_dir_all(&dir)?;
        let tmp = p.with_extension("tmp");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &p)?;
        Self::sync_dir(&dir)
    }

    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(name)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let rd = match fs::read_dir(self.path(dir)) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for e in rd {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".tmp") {
                out.push(format!("{dir}/{name}"));
            }
        }
        out.sort();
        Ok(out)
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.open.remove(from);
        self.open.remove(to);
        let dst = self.path(to);
        fs::rename(self.path(from), &dst)?;
        Self::sync_dir(dst.parent().expect("files live in the data directory"))
    }

    fn delete(&mut self, name: &str) -> io::Result<()> {
        self.open.remove(name);
        match fs::remove_file(self.path(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

pub const IDENTITY_FILE: &str = "TERN_DATA_NODE";
const IDENTITY_PREFIX: &str = "tern data node directory v1\nnode_id=";

/// An opened, locked data directory. The lock is held until this is dropped.
pub struct DataDir {
    pub path: PathBuf,
    _lock: File,
}

/// The last incarnation the control plane gave this node (written before the node opens its
/// data directory, so a fresh directory may hold it).
pub const INCARNATION_FILE: &str = "INCARNATION";

impl DataDir {
    /// Opens (creating if needed) a data directory for node `node_id`. Fails with a clear message
    /// when another process holds it, when it belongs to another node, or when it holds files
    /// that Tern did not write.
    pub fn open(path: &Path, node_id: u16) -> Result<DataDir, String> {
        fs::create_dir_all(path).map_err(|e| format!("cannot create data directory {}: {e}", path.display()))?;
        let lock_path = path.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(format!("data directory {} is in use by another process (locked)", path.display()));
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", lock_path.display()));
            }
        }
        let id_path = path.join(IDENTITY_FILE);
        let want = format!("{IDENTITY_PREFIX}{node_id}\n");
        match fs::read_to_string(&id_path) {
            Ok(s) if s == want => {}
            Ok(s) if s.starts_with(IDENTITY_PREFIX) => {
                return Err(format!(
                    "data directory {} belongs to data node {}, not {node_id}",
                    path.display(),
                    s[IDENTITY_PREFIX.len()..].trim()
                ));
            }
            Ok(_) => {
                return Err(format!(
                    "data directory {} was written by something else ({IDENTITY_FILE} is not Tern's)",
                    path.display()
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let foreign: Vec<String> = fs::read_dir(path)
                    .map_err(|e| e.to_string())?
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != "LOCK" && n != INCARNATION_FILE)
                    .collect();
                if !foreign.is_empty() {
                    return Err(format!(
                        "data directory {} is not empty and is not a Tern data directory (found {}); choose another directory",
                        path.display(),
                        foreign.join(", ")
                    ));
                }
                let mut s = FsStorage::new(path);
                s.write_atomic(IDENTITY_FILE, want.as_bytes())
                    .map_err(|e| format!("cannot write {}: {e}", id_path.display()))?;
            }
            Err(e) => return Err(format!("cannot read {}: {e}", id_path.display())),
        }
        Ok(DataDir { path: path.to_path_buf(), _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_basics() {
        let d = tempfile::tempdir().unwrap();
        let mut s = FsStorage::new(d.path());
        s.append("ldm-0/a.log", b"ab").unwrap();
        s.append("ldm-0/a.log", b"cd").unwrap();
        s.sync("ldm-0/a.log").unwrap();
        assert_eq!(s.read("ldm-0/a.log").unwrap().unwrap(), b"abcd");
        s.write_atomic("x", b"1").unwrap();
        s.write_atomic("x", b"2").unwrap();
        assert_eq!(s.read("x").unwrap().unwrap(), b"2");
        assert_eq!(s.list("ldm-0").unwrap(), vec!["ldm-0/a.log".to_string()]);
        s.delete("ldm-0/a.log").unwrap();
        assert_eq!(s.read("ldm-0/a.log").unwrap(), None);
        assert!(s.list("nope").unwrap().is_empty());
    }

    #[test]
    fn data_dir_identity_and_lock() {
        let d = tempfile::tempdir().unwrap();
        let a = DataDir::open(d.path(), 1).unwrap();
        let e = DataDir::open(d.path(), 1).err().unwrap();
        assert!(e.contains("in use"), "{e}");
        drop(a);
        assert!(DataDir::open(d.path(), 2).err().unwrap().contains("belongs to data node 1"));
        let f = tempfile::tempdir().unwrap();
        fs::write(f.path().join("ibdata1"), b"x").unwrap();
        let e = DataDir::open(f.path(), 1).err().unwrap();
        assert!(e.contains("not a Tern data directory"), "{e}");
    }
}
