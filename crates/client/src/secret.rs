//! The cluster secret of this process, read from its file (`tern_types::secret` has the proof
//! and its check; reading the file is I/O, so it lives here rather than in `wire`).

pub use tern_wire::SECRET_FILE_ENV;

/// The cluster secret in the file `path` (see `tern_types::secret`). A file others may read is
/// refused: the secret would not be one.
pub fn read_secret_file(path: &std::path::Path) -> Result<tern_types::secret::ClusterSecret, String> {
    use std::os::unix::fs::MetadataExt;
    let what = || format!("the cluster secret file {}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", what()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!("{} may be read by others (mode {:o}): chmod 600 it", what(), meta.mode() & 0o777));
    }
    if meta.len() > tern_types::secret::SECRET_MAX as u64 + 64 {
        return Err(format!("{} is too long", what()));
    }
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", what()))?;
    tern_types::secret::ClusterSecret::new(&text).map_err(|e| format!("{}: {e}", what()))
}

/// The cluster secret of this process: the file named by `TERN_CLUSTER_SECRET_FILE`, if set.
pub fn secret_from_env() -> Result<Option<tern_types::secret::ClusterSecret>, String> {
    match std::env::var_os(SECRET_FILE_ENV) {
        Some(p) if !p.is_empty() => read_secret_file(std::path::Path::new(&p)).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secret_files_must_be_private() {
        let dir = std::env::temp_dir().join(format!("tern-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        std::fs::write(&f, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_secret_file(&f).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = read_secret_file(&f).unwrap();
        assert!(s.verify(&tern_types::secret::ClusterSecret::new(b"0123456789abcdef0123").unwrap().proof()));
        assert!(read_secret_file(&dir.join("missing")).unwrap_err().contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
