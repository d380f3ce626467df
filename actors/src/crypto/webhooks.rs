//! Webhook signing secrets at rest: sealed by the master key itself, bound
//! to their org and endpoint, and naming the key like a data key's wrap.
//! Not by a data key: a BYOK org has none, and its webhooks sign all the
//! same. A master-key rotation re-seals them under the current key.

use super::{open_with, random_bytes, seal_with, CryptoError, Keyring, MasterKey};
use crate::domain::{OrgId, WebhookId};

impl MasterKey {
    /// Both ids in their canonical text (lowercase, hyphenated): what the
    /// secrets sealed while an endpoint's id was a string are bound to.
    fn webhook_aad(org: OrgId, webhook: WebhookId) -> String {
        format!("taskq/webhook-secret/{org}/{webhook}")
    }

    /// A webhook's signing secret sealed for storage, bound to its org and
    /// endpoint. Sealed by the master key itself, not a data key: a BYOK
    /// org has none, and its webhooks sign all the same.
    pub fn seal_webhook_secret(
        &self,
        org: OrgId,
        webhook: WebhookId,
        secret: &[u8],
    ) -> SealedSecret {
        SealedSecret {
            master_key_id: self.id.clone(),
            bytes: seal_with(
                &self.cipher,
                Self::webhook_aad(org, webhook).as_bytes(),
                secret,
            ),
        }
    }
}

/// A webhook's signing secret as stored: sealed by the master key it
/// names, and re-sealed by a master-key rotation like a data key's wrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub master_key_id: String,
    pub bytes: Vec<u8>,
}

/// A new webhook signing secret: 32 random bytes.
pub fn new_webhook_secret() -> [u8; 32] {
    random_bytes::<32>()
}

impl Keyring {
    /// A webhook's secret, opened by the master key that sealed it.
    pub fn open_webhook_secret(
        &self,
        org: OrgId,
        webhook: WebhookId,
        sealed: &SealedSecret,
    ) -> Result<Vec<u8>, CryptoError> {
        let key = self
            .key(&sealed.master_key_id)
            .ok_or_else(|| CryptoError::UnknownMasterKey(sealed.master_key_id.clone()))?;
        open_with(
            &key.cipher,
            MasterKey::webhook_aad(org, webhook).as_bytes(),
            &sealed.bytes,
        )
    }

    /// The same secret sealed by the current master key; `None` when it
    /// already is.
    pub fn reseal_webhook_secret(
        &self,
        org: OrgId,
        webhook: WebhookId,
        sealed: &SealedSecret,
    ) -> Result<Option<SealedSecret>, CryptoError> {
        let secret = self.open_webhook_secret(org, webhook, sealed)?;
        if sealed.master_key_id == self.current.id {
            return Ok(None);
        }
        Ok(Some(
            self.current.seal_webhook_secret(org, webhook, &secret),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master() -> MasterKey {
        MasterKey::from_base64(&MasterKey::generate_base64()).unwrap()
    }

    #[test]
    fn webhook_secrets_are_bound_to_their_endpoint_and_survive_a_rotation() {
        let org = OrgId::new_v7();
        let (a, b) = (WebhookId::new_v7(), WebhookId::new_v7());
        let (old, new) = (master(), master());
        let secret = new_webhook_secret();
        let sealed = old.seal_webhook_secret(org, a, &secret);
        let ring = Keyring::new(old.clone(), Vec::new());
        assert_eq!(ring.open_webhook_secret(org, a, &sealed).unwrap(), secret);
        assert_eq!(
            ring.open_webhook_secret(org, b, &sealed),
            Err(CryptoError::Binding)
        );
        assert_eq!(ring.reseal_webhook_secret(org, a, &sealed).unwrap(), None);
        let rotated = Keyring::new(new.clone(), vec![old]);
        let moved = rotated
            .reseal_webhook_secret(org, a, &sealed)
            .unwrap()
            .unwrap();
        assert_eq!(moved.master_key_id, new.id());
        let after = Keyring::new(new, Vec::new());
        assert_eq!(after.open_webhook_secret(org, a, &moved).unwrap(), secret);
        assert!(after.open_webhook_secret(org, a, &sealed).is_err());
    }

    /// A secret sealed when the endpoint's id was the string
    /// `Uuid::now_v7().to_string()` made still opens.
    #[test]
    fn secrets_sealed_under_the_id_s_text_still_open() {
        let org: OrgId = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d".parse().unwrap();
        let text = "0193c3b1-a2b4-7c3d-8e9f-0a1b2c3d4e5f";
        let key = master();
        let secret = new_webhook_secret();
        let aad = format!("taskq/webhook-secret/{org}/{text}");
        let sealed = SealedSecret {
            master_key_id: key.id.clone(),
            bytes: seal_with(&key.cipher, aad.as_bytes(), &secret),
        };
        let ring = Keyring::new(key, Vec::new());
        let id: WebhookId = text.to_uppercase().parse().unwrap();
        assert_eq!(ring.open_webhook_secret(org, id, &sealed).unwrap(), secret);
    }
}
