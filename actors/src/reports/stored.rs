//! Reports as stored: their keys, each report sealed under the org's data
//! key and bound to its own key, which reports apply to an org, and the
//! runbooks as claims and the planner match them (pure and unit-tested).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::{Cadence, ReportKind, Runbook};
use crate::crypto::OrgCipher;
use crate::domain::account::{Encryption, Tier};
use crate::domain::TaskId;
use crate::error::EngineError;
use crate::store::{ReportKey, StoreError};

/// The field reports are sealed under.
const SEAL_FIELD: &str = "report";

/// A runbook as stored: the answer plus what claims and the planner match
/// it by.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredRunbook {
    #[serde(flatten)]
    pub runbook: Runbook,
    /// The mean of its members' vectors, unit length; `None` when they had
    /// none.
    pub centroid: Option<Vec<f32>>,
    /// Words and tags shared by most of its members.
    pub terms: Vec<String>,
}

/// Reports that apply to an org of this tier and encryption.
pub fn applies(kind: ReportKind, tier: Tier, encryption: Encryption) -> bool {
    let managed = encryption == Encryption::Managed;
    let pro = tier.has_pro_features();
    match kind {
        ReportKind::Insights => tier.is_paid(),
        ReportKind::Standup => tier.is_paid() && managed,
        ReportKind::Runbooks | ReportKind::FailureClusters => pro && managed,
    }
}

/// The id a report's seal is bound to: a digest of its key, so a sealed
/// body opens only under the key it was written for.
fn binding(key: &ReportKey) -> TaskId {
    let digest = Sha256::digest(
        format!(
            "{}\n{}\n{}\n{}",
            key.kind, key.scope, key.cadence, key.period
        )
        .as_bytes(),
    );
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    TaskId(uuid::Uuid::from_bytes(bytes))
}

pub fn seal<T: Serialize>(cipher: &OrgCipher, key: &ReportKey, report: &T) -> Vec<u8> {
    let json = serde_json::to_vec(report).expect("reports serialize");
    cipher.seal(binding(key), SEAL_FIELD, &json)
}

pub fn open<T: for<'de> Deserialize<'de>>(
    cipher: &OrgCipher,
    key: &ReportKey,
    sealed: &[u8],
) -> Result<T, EngineError> {
    let json = cipher.open(binding(key), SEAL_FIELD, sealed).map_err(|_| {
        EngineError::Internal(format!("a stored {} report does not open", key.kind))
    })?;
    serde_json::from_slice(&json)
        .map_err(|e| EngineError::Store(StoreError::Corrupt(format!("{} report: {e}", key.kind))))
}

pub fn standup_key(scope: &str, cadence: Cadence, period: &str) -> ReportKey {
    ReportKey {
        kind: ReportKind::Standup.as_str(),
        scope: scope.to_owned(),
        cadence: cadence.as_str().to_owned(),
        period: period.to_owned(),
    }
}

/// Unit-length mean of vectors of one length; `None` if there are none.
pub fn centroid<'a>(vectors: impl Iterator<Item = &'a Vec<f32>>) -> Option<Vec<f32>> {
    let mut sum: Option<Vec<f32>> = None;
    for v in vectors {
        match &mut sum {
            None => sum = Some(v.clone()),
            Some(s) if s.len() == v.len() => s.iter_mut().zip(v).for_each(|(a, b)| *a += b),
            Some(_) => return None,
        }
    }
    let mut sum = sum?;
    crate::meaning::index::normalise(&mut sum).then_some(sum)
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Jaccard similarity of two term lists.
pub fn overlap(a: &[String], b: &[String]) -> f32 {
    let a: HashSet<&String> = a.iter().collect();
    let b: HashSet<&String> = b.iter().collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f32 / union as f32
}

/// The runbook that best fits a task or a goal: by vector when both have
/// one, else by shared terms; `None` below the thresholds.
pub fn best_runbook<'a>(
    runbooks: &'a [StoredRunbook],
    vector: Option<&[f32]>,
    terms: &[String],
) -> Option<(&'a StoredRunbook, f32)> {
    const VECTOR_MATCH: f32 = 0.5;
    const TERM_MATCH: f32 = 0.2;
    runbooks
        .iter()
        .filter_map(|r| match (vector, &r.centroid) {
            (Some(v), Some(c)) => Some((r, dot(v, c))).filter(|(_, s)| *s >= VECTOR_MATCH),
            _ => Some((r, overlap(terms, &r.terms))).filter(|(_, s)| *s >= TERM_MATCH),
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Timestamp;
    use crate::domain::OrgId;

    fn runbook(topic: &str, centroid: Option<Vec<f32>>, terms: &[&str]) -> StoredRunbook {
        StoredRunbook {
            runbook: Runbook {
                runbook_id: topic.to_owned(),
                topic: topic.to_owned(),
                body: String::new(),
                computed_at: Timestamp(0),
                member_count: 3,
                source_task_ids: Vec::new(),
            },
            centroid,
            terms: terms.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_best_runbook_matches_by_vector_or_by_terms() {
        let books = [
            runbook("tls", Some(vec![1.0, 0.0]), &["certificate", "rotate"]),
            runbook("db", Some(vec![0.0, 1.0]), &["database", "migrate"]),
        ];
        let (best, score) = best_runbook(&books, Some(&[0.6, 0.8]), &[]).unwrap();
        assert_eq!((best.runbook.topic.as_str(), score), ("db", 0.8));
        assert!(best_runbook(&books, Some(&[-1.0, 0.0]), &[]).is_none());
        let terms = vec![
            "rotate".to_owned(),
            "certificate".to_owned(),
            "x".to_owned(),
        ];
        let (best, _) = best_runbook(&books, None, &terms).unwrap();
        assert_eq!(best.runbook.topic, "tls");
        assert!(best_runbook(&books, None, &["unrelated".to_owned()]).is_none());
    }

    #[test]
    fn reports_open_only_under_their_own_key() {
        let org = OrgId(uuid::Uuid::now_v7());
        let cipher = crate::crypto::MasterKey::from_bytes(&[7; 32]);
        let wrapped = cipher.new_wrapped_dek(org);
        let cipher = cipher.unwrap_dek(org, &wrapped.bytes).unwrap();
        let a = standup_key("org", Cadence::Daily, "2026-11-23");
        let b = standup_key("org", Cadence::Daily, "2026-11-22");
        let sealed = seal(&cipher, &a, &vec![1, 2, 3]);
        assert_eq!(
            open::<Vec<i32>>(&cipher, &a, &sealed).unwrap(),
            vec![1, 2, 3]
        );
        assert!(open::<Vec<i32>>(&cipher, &b, &sealed).is_err());
        assert!(!String::from_utf8_lossy(&sealed).contains("1,2,3"));
    }

    #[test]
    fn centroids_are_unit_means() {
        let c = centroid([vec![1.0, 0.0], vec![0.0, 1.0]].iter()).unwrap();
        assert!((c[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert!(centroid([vec![1.0], vec![1.0, 0.0]].iter()).is_none());
        assert!(centroid(std::iter::empty()).is_none());
    }
}
