//! Encryption at rest, API key secrets and signed cursors.
//!
//! Managed orgs get a random 256-bit data key (DEK), stored wrapped by the
//! master key. Content fields are sealed with AES-256-GCM whose associated
//! data binds org id, task id and field name, so a ciphertext moved to another
//! row or field fails to open instead of serving the wrong value. BYOK orgs
//! encrypt on the client; their values are stored as given.
//!
//! A wrap names the master key that made it (the key's fingerprint), and
//! the server holds a [`Keyring`]: the current master key, which makes every
//! new wrap, and the previous ones, which still open old wraps. Rotating the
//! master key re-wraps each org's data key under the current key; the data
//! keys themselves, and so all sealed content, never change.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use crate::domain::account::WrappedDek;
use crate::domain::{OrgId, ScheduleId, TaskId, ID_TEXT_LEN};

mod webhooks;

pub use webhooks::{new_webhook_secret, SealedSecret};

const SEALED: u8 = 1;
const PLAIN: u8 = 0;
const NONCE_LEN: usize = 12;
const AAD_PREFIX: &str = "taskq/v1/";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CryptoError {
    #[error("master key must be base64 of exactly 32 bytes")]
    BadMasterKey,
    #[error("value fails its binding check")]
    Binding,
    #[error("the data key was wrapped by master key {0}, which this server does not hold")]
    UnknownMasterKey(String),
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    rand::thread_rng().fill_bytes(&mut out);
    out
}

/// The operator's key-encryption key.
#[derive(Clone)]
pub struct MasterKey {
    cipher: Aes256Gcm,
    id: String,
    /// A key derived for signing list cursors, so that every node with
    /// this master key accepts the cursors of the others.
    cursor_key: [u8; 32],
    /// What the nodes of one cluster present to each other.
    peer_token: String,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({})", self.id)
    }
}

impl MasterKey {
    pub fn from_base64(text: &str) -> Result<Self, CryptoError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| CryptoError::BadMasterKey)?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| CryptoError::BadMasterKey)?;
        Ok(Self::from_bytes(&key))
    }

    pub fn from_bytes(key: &[u8; 32]) -> Self {
        let digest = Sha256::new()
            .chain_update(b"taskq/master-key-id/")
            .chain_update(key)
            .finalize();
        let derive = |purpose: &[u8]| -> [u8; 32] {
            let mut mac =
                <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
            mac.update(purpose);
            mac.finalize().into_bytes().into()
        };
        Self {
            cipher: Aes256Gcm::new(key.into()),
            id: digest[..8].iter().map(|b| format!("{b:02x}")).collect(),
            cursor_key: derive(b"taskq/cursor-key"),
            peer_token: URL_SAFE_NO_PAD.encode(derive(b"taskq/peer-token")),
        }
    }

    /// The token the nodes of a cluster sharing this key present to each
    /// other.
    pub fn peer_token(&self) -> String {
        self.peer_token.clone()
    }

    /// The key's fingerprint: names it in wraps and logs without revealing it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A fresh random master key, base64-encoded (for the generated key file).
    pub fn generate_base64() -> String {
        STANDARD.encode(random_bytes::<32>())
    }

    fn dek_aad(org: OrgId) -> String {
        format!("taskq/dek/{org}")
    }

    /// A new data key for `org`, wrapped for storage.
    pub fn new_wrapped_dek(&self, org: OrgId) -> WrappedDek {
        self.wrap(org, &random_bytes::<32>())
    }

    fn wrap(&self, org: OrgId, dek: &[u8; 32]) -> WrappedDek {
        WrappedDek {
            master_key_id: Some(self.id.clone()),
            bytes: seal_with(&self.cipher, Self::dek_aad(org).as_bytes(), dek),
        }
    }

    fn open_dek(&self, org: OrgId, wrapped: &[u8]) -> Result<[u8; 32], CryptoError> {
        let dek = open_with(&self.cipher, Self::dek_aad(org).as_bytes(), wrapped)?;
        dek.try_into().map_err(|_| CryptoError::Binding)
    }

    pub fn unwrap_dek(&self, org: OrgId, wrapped: &[u8]) -> Result<OrgCipher, CryptoError> {
        Ok(OrgCipher::managed(org, &self.open_dek(org, wrapped)?))
    }
}

/// The master keys a server holds: the current one makes every new wrap;
/// the previous ones still open wraps made before a rotation finished.
#[derive(Debug, Clone)]
pub struct Keyring {
    current: MasterKey,
    previous: Vec<MasterKey>,
}

impl Keyring {
    /// `previous` keys equal to `current`, or repeated, are dropped.
    pub fn new(current: MasterKey, previous: Vec<MasterKey>) -> Self {
        let mut kept: Vec<MasterKey> = Vec::new();
        for k in previous {
            if k.id != current.id && kept.iter().all(|p| p.id != k.id) {
                kept.push(k);
            }
        }
        Self {
            current,
            previous: kept,
        }
    }

    pub fn current(&self) -> &MasterKey {
        &self.current
    }

    pub fn previous(&self) -> &[MasterKey] {
        &self.previous
    }

    /// The same keys with the one named `id` current (the old current one
    /// among the previous); `None` when it is current already or not held.
    pub fn with_current(&self, id: &str) -> Option<Keyring> {
        if self.current.id == id {
            return None;
        }
        let next = self.key(id)?.clone();
        let mut previous = vec![self.current.clone()];
        previous.extend(self.previous.iter().cloned());
        Some(Keyring::new(next, previous))
    }

    /// Whether the key named `id` is held.
    pub fn holds(&self, id: &str) -> bool {
        self.key(id).is_some()
    }

    /// The key named `id`, if held.
    fn key(&self, id: &str) -> Option<&MasterKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
    }

    fn open_dek(&self, org: OrgId, wrapped: &WrappedDek) -> Result<[u8; 32], CryptoError> {
        match &wrapped.master_key_id {
            Some(id) => self
                .key(id)
                .ok_or_else(|| CryptoError::UnknownMasterKey(id.clone()))?
                .open_dek(org, &wrapped.bytes),
            // An unnamed wrap: whichever key opens it made it.
            None => std::iter::once(&self.current)
                .chain(&self.previous)
                .find_map(|k| k.open_dek(org, &wrapped.bytes).ok())
                .ok_or(CryptoError::Binding),
        }
    }

    pub fn unwrap_dek(&self, org: OrgId, wrapped: &WrappedDek) -> Result<OrgCipher, CryptoError> {
        Ok(OrgCipher::managed(org, &self.open_dek(org, wrapped)?))
    }

    /// The same data key wrapped by the current master key; `None` when it
    /// already is.
    pub fn rewrap(
        &self,
        org: OrgId,
        wrapped: &WrappedDek,
    ) -> Result<Option<WrappedDek>, CryptoError> {
        let dek = self.open_dek(org, wrapped)?;
        if wrapped.master_key_id.as_deref() == Some(self.current.id()) {
            return Ok(None);
        }
        Ok(Some(self.current.wrap(org, &dek)))
    }
}

fn seal_with(cipher: &Aes256Gcm, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
    let nonce = random_bytes::<NONCE_LEN>();
    let ct = cipher
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .expect("AES-GCM encryption cannot fail for in-memory buffers");
    let mut out = Vec::with_capacity(1 + NONCE_LEN + ct.len());
    out.push(SEALED);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    out
}

fn open_with(cipher: &Aes256Gcm, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
    if sealed.len() < 1 + NONCE_LEN || sealed[0] != SEALED {
        return Err(CryptoError::Binding);
    }
    let (nonce, ct) = sealed[1..].split_at(NONCE_LEN);
    cipher
        .decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad })
        .map_err(|_| CryptoError::Binding)
}

/// Seals and opens one org's content. `cipher` is `None` for BYOK orgs,
/// whose values are stored as the client sent them.
#[derive(Clone)]
pub struct OrgCipher {
    org: OrgId,
    cipher: Option<Aes256Gcm>,
}

impl std::fmt::Debug for OrgCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrgCipher")
            .field("org", &self.org)
            .field("managed", &self.cipher.is_some())
            .finish()
    }
}

/// What a sealed value belongs to within its org: a task (its content
/// fields), or a schedule (its template). The id takes one place in the
/// associated data for both, which is where templates were always bound,
/// so stored ones still open; the field names keep the two kinds apart.
pub trait Holder: Copy {
    fn encode<'b>(&self, buf: &'b mut [u8; ID_TEXT_LEN]) -> &'b str;
}

impl Holder for TaskId {
    fn encode<'b>(&self, buf: &'b mut [u8; ID_TEXT_LEN]) -> &'b str {
        TaskId::encode(self, buf)
    }
}

impl Holder for ScheduleId {
    fn encode<'b>(&self, buf: &'b mut [u8; ID_TEXT_LEN]) -> &'b str {
        ScheduleId::encode(self, buf)
    }
}

impl OrgCipher {
    fn managed(org: OrgId, dek: &[u8; 32]) -> Self {
        Self {
            org,
            cipher: Some(Aes256Gcm::new(dek.into())),
        }
    }

    pub fn client_encrypted(org: OrgId) -> Self {
        Self { org, cipher: None }
    }

    pub fn is_managed(&self) -> bool {
        self.cipher.is_some()
    }

    /// `taskq/v1/{org}/{holder}/{field}`: binds a ciphertext to its place.
    /// Built by hand, as it is for every field of every task answered or
    /// stored; the bytes must never change, or stored content stops opening.
    fn aad(&self, holder: impl Holder, field: &str) -> String {
        let mut aad = String::with_capacity(AAD_PREFIX.len() + 2 * (ID_TEXT_LEN + 1) + field.len());
        aad.push_str(AAD_PREFIX);
        aad.push_str(self.org.encode(&mut [0; ID_TEXT_LEN]));
        aad.push('/');
        aad.push_str(holder.encode(&mut [0; ID_TEXT_LEN]));
        aad.push('/');
        aad.push_str(field);
        aad
    }

    pub fn seal(&self, holder: impl Holder, field: &str, plaintext: &[u8]) -> Vec<u8> {
        match &self.cipher {
            Some(c) => seal_with(c, self.aad(holder, field).as_bytes(), plaintext),
            None => {
                let mut out = Vec::with_capacity(plaintext.len() + 1);
                out.push(PLAIN);
                out.extend_from_slice(plaintext);
                out
            }
        }
    }

    pub fn open(
        &self,
        holder: impl Holder,
        field: &str,
        stored: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        match (&self.cipher, stored.first()) {
            (Some(c), _) => open_with(c, self.aad(holder, field).as_bytes(), stored),
            (None, Some(&PLAIN)) => Ok(stored[1..].to_vec()),
            (None, _) => Err(CryptoError::Binding),
        }
    }
}

/// A new API key secret (256 random bits), URL-safe.
pub fn new_key_secret() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes::<32>())
}

/// What is stored for a key secret: its SHA-256 (the secret has full entropy,
/// so a slow hash buys nothing).
pub fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

pub fn secret_matches(secret: &str, stored_hash: &[u8]) -> bool {
    hash_secret(secret).ct_eq(stored_hash).into()
}

/// Whether a presented token is the expected one, in constant time.
pub fn tokens_match(expected: &str, given: &str) -> bool {
    hash_secret(expected).ct_eq(&hash_secret(given)).into()
}

/// Signs list cursors: see [`CursorSigner::derived`].
#[derive(Clone)]
pub struct CursorSigner {
    /// The first signs; any of them verifies.
    keys: Vec<[u8; 32]>,
}

impl Default for CursorSigner {
    fn default() -> Self {
        Self {
            keys: vec![random_bytes::<32>()],
        }
    }
}

impl CursorSigner {
    /// Keys derived from the keyring's master keys (the current one signs)
    /// and the store's schema version: every node with the same master key
    /// accepts a cursor, across restarts, and a deployment that changes
    /// the schema, and with it what a cursor means, refuses the old ones.
    pub fn derived(keyring: &Keyring, schema_version: i64) -> Self {
        let keys = std::iter::once(keyring.current())
            .chain(keyring.previous())
            .map(|master| {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&master.cursor_key)
                    .expect("HMAC takes keys of any length");
                mac.update(format!("schema {schema_version}").as_bytes());
                mac.finalize().into_bytes().into()
            })
            .collect();
        Self { keys }
    }

    fn mac(key: &[u8; 32]) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length")
    }

    /// `payload.signature`, both base64url.
    pub fn sign(&self, payload: &[u8]) -> String {
        let mut mac = Self::mac(&self.keys[0]);
        mac.update(payload);
        let tag = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    pub fn verify(&self, token: &str) -> Option<Vec<u8>> {
        let (payload, tag) = token.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        self.keys
            .iter()
            .any(|key| {
                let mut mac = Self::mac(key);
                mac.update(&payload);
                mac.verify_slice(&tag).is_ok()
            })
            .then_some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master() -> MasterKey {
        MasterKey::from_base64(&MasterKey::generate_base64()).unwrap()
    }

    #[test]
    fn associated_data_keeps_the_bytes_content_was_sealed_with() {
        let org = OrgId::new_v7();
        let m = master();
        let cipher = m.unwrap_dek(org, &m.new_wrapped_dek(org).bytes).unwrap();
        let task = TaskId::new_v7();
        let old = format!("taskq/v1/{org}/{task}/output");
        assert_eq!(cipher.aad(task, "output"), old);
        let sealed = seal_with(cipher.cipher.as_ref().unwrap(), old.as_bytes(), b"{}");
        assert_eq!(cipher.open(task, "output", &sealed).unwrap(), b"{}");
        // A schedule's template is bound where its id always stood.
        let schedule = ScheduleId::new_v7();
        let old = format!("taskq/v1/{org}/{schedule}/schedule_task");
        assert_eq!(cipher.aad(schedule, "schedule_task"), old);
        let sealed = seal_with(cipher.cipher.as_ref().unwrap(), old.as_bytes(), b"{}");
        assert_eq!(
            cipher.open(schedule, "schedule_task", &sealed).unwrap(),
            b"{}"
        );
    }

    #[test]
    fn sealed_values_are_bound_to_org_task_and_field() {
        let org = OrgId::new_v7();
        let m = master();
        let cipher = m.unwrap_dek(org, &m.new_wrapped_dek(org).bytes).unwrap();
        let (a, b) = (TaskId::new_v7(), TaskId::new_v7());
        let sealed = cipher.seal(a, "title", b"secret title");
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(cipher.open(a, "title", &sealed).unwrap(), b"secret title");
        assert_eq!(cipher.open(b, "title", &sealed), Err(CryptoError::Binding));
        assert_eq!(
            cipher.open(a, "description", &sealed),
            Err(CryptoError::Binding)
        );
    }

    #[test]
    fn a_dek_opens_only_for_its_org_and_master() {
        let (org, other) = (OrgId::new_v7(), OrgId::new_v7());
        let m = master();
        let wrapped = m.new_wrapped_dek(org).bytes;
        assert!(m.unwrap_dek(other, &wrapped).is_err());
        assert!(master().unwrap_dek(org, &wrapped).is_err());
        assert!(MasterKey::from_base64("c2hvcnQ=").is_err());
    }

    #[test]
    fn a_rotation_rewraps_the_same_data_key_under_the_new_master() {
        let org = OrgId::new_v7();
        let (old, new) = (master(), master());
        assert_ne!(old.id(), new.id());
        let wrapped = old.new_wrapped_dek(org);
        assert_eq!(wrapped.master_key_id.as_deref(), Some(old.id()));
        let before = old.unwrap_dek(org, &wrapped.bytes).unwrap();
        let task = TaskId::new_v7();
        let sealed = before.seal(task, "title", b"kept");

        let ring = Keyring::new(new.clone(), vec![old.clone(), new.clone()]);
        assert_eq!(ring.previous().len(), 1);
        let moved = ring.rewrap(org, &wrapped).unwrap().expect("moved");
        assert_eq!(moved.master_key_id.as_deref(), Some(new.id()));
        assert_eq!(ring.rewrap(org, &moved).unwrap(), None);
        // Only the new key is needed now, and content sealed before opens.
        let after = Keyring::new(new.clone(), vec![])
            .unwrap_dek(org, &moved)
            .unwrap();
        assert_eq!(after.open(task, "title", &sealed).unwrap(), b"kept");
        // The old wrap names a key the new ring no longer holds.
        assert_eq!(
            Keyring::new(new, vec![])
                .unwrap_dek(org, &wrapped)
                .unwrap_err(),
            CryptoError::UnknownMasterKey(old.id().to_owned())
        );
        // An unnamed wrap opens with whichever held key made it.
        let unnamed = WrappedDek {
            master_key_id: None,
            ..wrapped
        };
        assert!(ring.unwrap_dek(org, &unnamed).is_ok());
    }

    #[test]
    fn key_secrets_hash_and_compare() {
        let s = new_key_secret();
        assert!(s.len() >= 43);
        let h = hash_secret(&s);
        assert!(secret_matches(&s, &h));
        assert!(!secret_matches("other", &h));
    }

    #[test]
    fn cursors_verify_only_with_their_signer() {
        let signer = CursorSigner::default();
        let token = signer.sign(b"page-2");
        assert_eq!(signer.verify(&token).unwrap(), b"page-2");
        assert!(CursorSigner::default().verify(&token).is_none());
        let tampered = token.replacen('.', "x.", 1);
        assert!(signer.verify(&tampered).is_none());
    }

    #[test]
    fn derived_cursor_keys_follow_the_master_key_and_the_schema() {
        let key = MasterKey::from_bytes(&[7; 32]);
        let other = MasterKey::from_bytes(&[8; 32]);
        let node_a = CursorSigner::derived(&Keyring::new(key.clone(), vec![]), 17);
        let node_b = CursorSigner::derived(&Keyring::new(key.clone(), vec![]), 17);
        let token = node_a.sign(b"page-2");
        // Another node (or a restart) with the same key accepts it.
        assert_eq!(node_b.verify(&token).unwrap(), b"page-2");
        // A new schema, or another master key, does not.
        let migrated = CursorSigner::derived(&Keyring::new(key.clone(), vec![]), 18);
        assert!(migrated.verify(&token).is_none());
        let foreign = CursorSigner::derived(&Keyring::new(other.clone(), vec![]), 17);
        assert!(foreign.verify(&token).is_none());
        // After a rotation the old key still verifies what it signed.
        let rotated = CursorSigner::derived(&Keyring::new(other, vec![key]), 17);
        assert_eq!(rotated.verify(&token).unwrap(), b"page-2");
    }
}
