//! The org directory: each org's record and content cipher, cached, and the
//! master keys that open the data keys.
//!
//! Shared by the org actors and the read path. The record changes only
//! through the operator API, which writes the store first and then refreshes
//! the entry here. A master-key rotation swaps the keyring; the cached
//! ciphers hold data keys, which a rotation never changes, so they stay.

use std::sync::{Arc, RwLock};

use dashmap::DashMap;

use crate::crypto::{Keyring, OrgCipher};
use crate::domain::account::{Encryption, LimitKey, Limits, OrgRecord};
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::store::Store;

#[derive(Debug)]
pub struct OrgEntry {
    pub record: OrgRecord,
    pub cipher: OrgCipher,
    /// The effective limits, worked out once per change of the record.
    limits: Limits,
}

impl OrgEntry {
    /// An effective limit; `None` when unlimited.
    pub fn limit(&self, key: LimitKey) -> Option<i64> {
        self.limits.get(key)
    }
}

pub struct OrgDirectory {
    store: Store,
    keyring: RwLock<Arc<Keyring>>,
    entries: DashMap<OrgId, Arc<OrgEntry>>,
}

impl OrgDirectory {
    pub fn new(store: Store, keyring: Keyring) -> Self {
        Self {
            store,
            keyring: RwLock::new(Arc::new(keyring)),
            entries: DashMap::new(),
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

    /// The org's entry, loading it on first use; `NotFound` for no such org.
    pub async fn get(&self, org: OrgId) -> Result<Arc<OrgEntry>, EngineError> {
        if let Some(e) = self.entries.get(&org) {
            return Ok(e.clone());
        }
        let record = self
            .store
            .get_org(org)
            .await?
            .ok_or_else(|| EngineError::NotFound("organization not found".into()))?;
        let entry = Arc::new(self.entry_for(record)?);
        self.entries.insert(org, entry.clone());
        Ok(entry)
    }

    pub fn entry_for(&self, record: OrgRecord) -> Result<OrgEntry, EngineError> {
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
        })
    }

    /// The cached entry, if loaded.
    pub fn cached(&self, org: OrgId) -> Option<Arc<OrgEntry>> {
        self.entries.get(&org).map(|e| e.clone())
    }

    /// Replaces the cached entry after the store was updated.
    pub fn refresh(&self, record: OrgRecord) -> Result<Arc<OrgEntry>, EngineError> {
        let entry = Arc::new(self.entry_for(record)?);
        self.entries.insert(entry.record.org_id, entry.clone());
        Ok(entry)
    }
}
