//! Where the master keys come from, and how a rotation moves them on disk.
//!
//! Either `TASKQ_MASTER_KEY` (with `TASKQ_MASTER_KEY_PREVIOUS`, a comma
//! list, during a rotation), which the operator manages, or files in the
//! data directory, which the server manages: `master.key` holds the current
//! key and `master.key.previous` the keys a rotation still needs, one per
//! line. A file rotation writes the previous file before it replaces the
//! current one (each by a synced temporary file renamed into place), so a
//! crash between any two steps leaves files that open every wrap in the
//! store. [`rotate`] is the rotation itself, shared by the operator API
//! and `taskq keys rotate-master`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use taskq_actors::api::MasterKeyRotated;
use taskq_actors::crypto::{Keyring, MasterKey};
use taskq_actors::{Engine, EngineError};

const CURRENT: &str = "master.key";
const PREVIOUS: &str = "master.key.previous";

#[derive(Debug, Clone)]
pub enum KeySource {
    /// `TASKQ_MASTER_KEY`: the operator rotates by setting the variables.
    Env,
    /// Files in this data directory.
    Files(PathBuf),
}

impl KeySource {
    pub fn of(data_dir: &Path) -> Self {
        match std::env::var("TASKQ_MASTER_KEY") {
            Ok(_) => KeySource::Env,
            Err(_) => KeySource::Files(data_dir.to_owned()),
        }
    }

    /// The keyring, creating `master.key` on first start.
    pub fn load(&self) -> anyhow::Result<Keyring> {
        match self {
            KeySource::Env => {
                let current = std::env::var("TASKQ_MASTER_KEY").unwrap_or_default();
                let current = MasterKey::from_base64(&current).context("TASKQ_MASTER_KEY")?;
                let previous = std::env::var("TASKQ_MASTER_KEY_PREVIOUS").unwrap_or_default();
                let previous = keys(&previous).context("TASKQ_MASTER_KEY_PREVIOUS")?;
                Ok(Keyring::new(current, previous))
            }
            KeySource::Files(dir) => {
                create_if_absent(dir)?;
                let current = read(&dir.join(CURRENT))?;
                let current = MasterKey::from_base64(&current)
                    .with_context(|| format!("{}", dir.join(CURRENT).display()))?;
                let previous = match std::fs::read_to_string(dir.join(PREVIOUS)) {
                    Ok(text) => {
                        keys(&text).with_context(|| format!("{}", dir.join(PREVIOUS).display()))?
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                    Err(e) => return Err(e).context(PREVIOUS),
                };
                Ok(Keyring::new(current, previous))
            }
        }
    }

    /// Makes `new` the current key on disk, keeping the one it replaces
    /// (and any still listed) as previous; answers the keyring to install.
    /// With `TASKQ_MASTER_KEY`, `new` must already be the current key: the
    /// operator moves the variables, and the rotation only re-wraps.
    pub fn stage(&self, new: &str) -> Result<Keyring, RotationError> {
        let new_key = MasterKey::from_base64(new).map_err(|_| RotationError::InvalidKey)?;
        let dir = match self {
            KeySource::Env => {
                let ring = self.load().map_err(RotationError::keys("read"))?;
                if ring.current().id() == new_key.id() {
                    return Ok(ring);
                }
                // Several nodes: each holds the new key among the previous
                // ones before one of them makes it current.
                return ring
                    .with_current(new_key.id())
                    .ok_or(RotationError::NotInEnvironment);
            }
            KeySource::Files(dir) => dir,
        };
        install(dir, new, &new_key).map_err(RotationError::keys("written"))?;
        self.load().map_err(RotationError::keys("read"))
    }

    /// Forgets the previous keys on disk once no wrap needs them.
    pub fn retire_previous(&self) -> anyhow::Result<()> {
        if let KeySource::Files(dir) = self {
            match std::fs::remove_file(dir.join(PREVIOUS)) {
                Ok(()) => sync_dir(dir)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).context(PREVIOUS),
            }
        }
        Ok(())
    }
}

/// Why a rotation stopped. Each message is one line for the operator; a
/// failure of the key files keeps its cause (with its chain) for the log.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// The engine refused or failed the re-wrap.
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the new master key is not base64 of 32 bytes")]
    InvalidKey,
    /// The operator manages the keys through the environment, and the new
    /// key is not among them yet.
    #[error(
        "the master key comes from TASKQ_MASTER_KEY: set TASKQ_MASTER_KEY to the new key and \
         TASKQ_MASTER_KEY_PREVIOUS to the old one (or the new one among \
         TASKQ_MASTER_KEY_PREVIOUS), restart, then rotate again"
    )]
    NotInEnvironment,
    #[error("the master keys could not be {action}")]
    Keys {
        /// `read`, `written` or `retired`.
        action: &'static str,
        #[source]
        cause: anyhow::Error,
    },
}

impl RotationError {
    fn keys(action: &'static str) -> impl FnOnce(anyhow::Error) -> Self {
        move |cause| RotationError::Keys { action, cause }
    }
}

/// Installs `new_key` as the current master key, re-wraps every data key
/// with it, and forgets the previous keys once nothing needs them.
pub async fn rotate(
    engine: &Engine,
    source: &KeySource,
    new_key: &str,
) -> Result<MasterKeyRotated, RotationError> {
    let keyring = source.stage(new_key)?;
    let report = engine.rotate_master(keyring).await?;
    if report.previous_keys_retired {
        source
            .retire_previous()
            .map_err(RotationError::keys("retired"))?;
    }
    Ok(report)
}

/// Writes `new` as the current key file of `dir`, the key it replaces
/// kept in the previous file.
fn install(dir: &Path, new: &str, new_key: &MasterKey) -> anyhow::Result<()> {
    create_if_absent(dir)?;
    let current = read(&dir.join(CURRENT))?;
    if MasterKey::from_base64(&current)?.id() != new_key.id() {
        let mut previous = match std::fs::read_to_string(dir.join(PREVIOUS)) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).context(PREVIOUS),
        };
        if !previous.lines().any(|l| l.trim() == current.trim()) {
            previous.push_str(current.trim());
            previous.push('\n');
        }
        replace(dir, PREVIOUS, &previous)?;
        replace(dir, CURRENT, new.trim())?;
        tracing::info!(
            master_key_id = new_key.id(),
            "new master key installed on disk"
        );
    }
    Ok(())
}

/// Keys given one per line or comma-separated; blanks are skipped.
fn keys(text: &str) -> anyhow::Result<Vec<MasterKey>> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| MasterKey::from_base64(k).map_err(anyhow::Error::from))
        .collect()
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Creates `master.key` with a new random key (mode 0600) if it is absent.
fn create_if_absent(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(CURRENT);
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    match private_file(&path, true) {
        Ok(mut f) => {
            f.write_all(MasterKey::generate_base64().as_bytes())?;
            f.sync_all()?;
            tracing::info!(path = %path.display(), "generated a new master key");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

fn private_file(path: &Path, create_new: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true).truncate(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Replaces `dir/name` with `text`, atomically and durably.
fn replace(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = private_file(&tmp, false).with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name)).with_context(|| format!("replacing {name}"))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_rotation_keeps_the_old_key_until_retired() {
        let dir = std::env::temp_dir().join(format!("taskq-keys-{}", uuid::Uuid::new_v4()));
        let source = KeySource::Files(dir.clone());
        let first = source.load().unwrap();
        assert!(first.previous().is_empty());

        let new = MasterKey::generate_base64();
        let ring = source.stage(&new).unwrap();
        assert_eq!(
            ring.current().id(),
            MasterKey::from_base64(&new).unwrap().id()
        );
        assert_eq!(ring.previous()[0].id(), first.current().id());
        // Staging again, as after a crash, changes nothing.
        let again = source.stage(&new).unwrap();
        assert_eq!(again.previous().len(), 1);
        assert_eq!(source.load().unwrap().previous().len(), 1);

        source.retire_previous().unwrap();
        let after = source.load().unwrap();
        assert_eq!(after.current().id(), ring.current().id());
        assert!(after.previous().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
