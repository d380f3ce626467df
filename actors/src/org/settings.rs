//! The org's own record: tier, seats, limits, suspension and the
//! identity-provider enrollment change here and nowhere else, so each
//! change applies to the record as the one before it left it.

use std::sync::Arc;

use super::work::Work;
use super::{OrgActor, OrgState};
use crate::directory::OrgEntry;
use crate::domain::account::SettingsChange;
use crate::store::WriteOp;

impl OrgActor {
    /// Applies the change to the actor's record and writes the settings
    /// columns. Answers the new entry, which the engine installs in the
    /// directory once the write is durable; the actor decides by it at once.
    pub(super) fn change_settings(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        change: &SettingsChange,
    ) -> Arc<OrgEntry> {
        let mut record = state.entry.record.clone();
        if record.apply(change) {
            work.accounts
                .push(WriteOp::UpdateOrgSettings(record.clone()));
            state.entry = self.deps.directory.changed(&state.entry, record);
        }
        state.entry.clone()
    }
}
