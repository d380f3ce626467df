//! The org directory: each org's record and content cipher, cached, and the
//! master keys that open the data keys.
//!
//! Shared by the org actors and the read path. The record's settings change
//! only in the org's actor (`OrgMsg::ChangeSettings`); the engine installs
//! the actor's new entry here once its commit is durable, and an actor
//! installs the stored record when it starts. Entries carry a version, so
//! of two installs racing the newer wins, and a load on a cache miss (which
//! may have read the store before a change committed) never replaces an
//! installed entry. A master-key rotation swaps the keyring; the cached
//! ciphers hold data keys, which a rotation never changes, so they stay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::crypto::{Keyring, OrgCipher};
use crate::domain::account::{Encryption, LimitKey, Limits, OrgRecord, StoredOrg};
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::store::Store;

#[derive(Debug)]
pub struct OrgEntry {
    pub record: OrgRecord,
    pub cipher: OrgCipher,
    /// The effective limits, worked out once per change of the record.
    limits: Limits,
    /// Orders installs: 0 for a load on a cache miss, then increasing.
    version: u64,
}

impl OrgEntry {
    /// An effective limit; `None` when unlimited.
    pub fn limit(&self, key: LimitKey) -> Option<i64> {
        self.limits.get(key)
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// The record of an org that is not deleted: `NotFound` for an id the
/// store does not hold, `OrgDeleting` while a deleted org's rows remain.
pub fn live(found: Option<StoredOrg>) -> Result<OrgRecord, EngineError> {
    match found {
        Some(StoredOrg::Live(record)) => Ok(record),
        Some(StoredOrg::Deleting) => Err(EngineError::OrgDeleting),
        None => Err(EngineError::NotFound("organization not found".into())),
    }
}

pub struct OrgDirectory {
    store: Store,
    keyring: RwLock<Arc<Keyring>>,
    entries: DashMap<OrgId, Arc<OrgEntry>>,
    versions: AtomicU64,
}

impl OrgDirectory {
    pub fn new(store: Store, keyring: Keyring) -> Self {
        Self {
            store,
            keyring: RwLock::new(Arc::new(keyring)),
            entries: DashMap::new(),
            versions: AtomicU64::new(1),
        }
    }

    pub fn keyring(&self) -> Arc<Keyring> {
        self.keyring
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_keyring(&self, keyring: Keyring) {
        *self.keyring.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keyring);
    }

    /// The org's entry, loading it on first use; `NotFound` for no such
    /// org, `OrgDeleting` while a deleted org's rows are removed.
    pub async fn get(&self, org: OrgId) -> Result<Arc<OrgEntry>, EngineError> {
        if let Some(e) = self.entries.get(&org) {
            return Ok(e.clone());
        }
        let record = live(self.store.find_org(org).await?)?;
        let loaded = Arc::new(self.entry_for(record, 0)?);
        Ok(self.entries.entry(org).or_insert(loaded).clone())
    }

    fn next_version(&self) -> u64 {
        self.versions.fetch_add(1, Ordering::Relaxed)
    }

    fn entry_for(&self, record: OrgRecord, version: u64) -> Result<OrgEntry, EngineError> {
        let cipher = match (record.encryption, &record.wrapped_dek) {
            (Encryption::Byok, _) => OrgCipher::client_encrypted(record.org_id),
            (Encryption::Managed, Some(wrapped)) => self
                .keyring()
                .unwrap_dek(record.org_id, wrapped)
                .map_err(|e| {
                    EngineError::Internal(format!(
                        "the data key of org {} does not open: {e}",
                        record.org_id
                    ))
                })?,
            (Encryption::Managed, None) => {
                return Err(EngineError::Internal(format!(
                    "managed org {} has no data key",
                    record.org_id
                )))
            }
        };
        Ok(OrgEntry {
            limits: record.effective_limits(),
            record,
            cipher,
            version,
        })
    }

    /// A new entry for a changed record of the same org, its cipher kept.
    pub fn changed(&self, entry: &OrgEntry, record: OrgRecord) -> Arc<OrgEntry> {
        Arc::new(OrgEntry {
            limits: record.effective_limits(),
            record,
            cipher: entry.cipher.clone(),
            version: self.next_version(),
        })
    }

    /// Installs the record as the store holds it, read by the org's actor
    /// as it starts (so an actor never acts on a change that did not
    /// commit), or written by the org's creation.
    pub fn install_stored(&self, record: OrgRecord) -> Result<Arc<OrgEntry>, EngineError> {
        let entry = Arc::new(self.entry_for(record, self.next_version())?);
        self.install(entry.clone());
        Ok(entry)
    }

    /// Drops a deleted org's entry (and with it its data key).
    pub fn forget(&self, org: OrgId) {
        self.entries.remove(&org);
    }

    /// The cached entry, if loaded.
    pub fn cached(&self, org: OrgId) -> Option<Arc<OrgEntry>> {
        self.entries.get(&org).map(|e| e.clone())
    }

    /// Installs an entry unless a newer one is there.
    pub fn install(&self, entry: Arc<OrgEntry>) {
        match self.entries.entry(entry.record.org_id) {
            Entry::Occupied(mut o) => {
                if o.get().version < entry.version {
                    o.insert(entry);
                }
            }
            Entry::Vacant(v) => {
                v.insert(entry);
            }
        }
    }
}
