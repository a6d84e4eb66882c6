//! The simulated disk: each file has the bytes written so far and the prefix known durable;
//! a crash keeps the durable prefix and a random, possibly torn, part of the rest.

use super::*;

/// An in-memory disk: each file has the bytes written so far and the prefix known durable.
#[derive(Default, Clone)]
pub struct SimDisk {
    pub(crate) files: BTreeMap<String, (Vec<u8>, usize)>,
}

impl SimDisk {
    /// Loses what was not synced: each file keeps its durable prefix plus a random part of the rest,
    /// whose last bytes may be damaged (a torn write).
    pub fn crash(&mut self, rng: &mut Rng) {
        for (data, durable) in self.files.values_mut() {
            let extra = data.len() - *durable;
            let keep = if extra == 0 { 0 } else { rng.below(extra as u64 + 1) as usize };
            data.truncate(*durable + keep);
            if keep > 0 && rng.chance(50) {
                let at = *durable + rng.below(keep as u64) as usize;
                data[at] ^= 0x5A;
            }
        }
    }

    pub fn file_names(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    /// Flips a byte of a file (for corruption tests).
    pub fn damage(&mut self, name: &str, offset: usize) {
        let f = self.files.get_mut(name).expect("file exists");
        f.0[offset] ^= 0xFF;
    }

    /// Appends bytes to a file without syncing them (a torn tail).
    pub fn append_garbage(&mut self, name: &str, bytes: &[u8]) {
        self.files.get_mut(name).expect("file exists").0.extend_from_slice(bytes);
    }
}

impl Storage for SimDisk {
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.files.entry(name.to_string()).or_default().0.extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        if let Some(f) = self.files.get_mut(name) {
            f.1 = f.0.len();
        }
        Ok(())
    }
    fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.files.insert(name.to_string(), (bytes.to_vec(), bytes.len()));
        Ok(())
    }
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.files.get(name).map(|f| f.0.clone()))
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let prefix = format!("{dir}/");
        Ok(self.files.keys().filter(|k| k.starts_with(&prefix)).cloned().collect())
    }
    fn delete(&mut self, name: &str) -> io::Result<()> {
        self.files.remove(name);
        Ok(())
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        match self.files.remove(from) {
            Some(f) => {
                self.files.insert(to.to_string(), f);
                Ok(())
            }
            None => Err(io::Error::new(io::ErrorKind::NotFound, from.to_string())),
        }
    }
}
