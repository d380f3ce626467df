//! The account changes of a group commit (orgs, members, keys, tags,
//! teams): rare, one statement each, the same text on both backends. A
//! macro, since each backend runs them on its own connection type.

/// The account statements of a `CommitPlan` (orgs, members, keys, tags,
/// teams: rare, one statement each), each executed on `$exec`, for either
/// backend.
macro_rules! account_statements {
    ($exec:expr, $plan:ident) => {{
        {
            use $crate::store::commit::WriteOp;
            use $crate::store::rows::OrgRow;
            for (org, op) in &$plan.accounts {
                let org = org.to_string();
                match op {
                    WriteOp::InsertOrg(record) => {
                        let o = OrgRow::from(record);
                        sqlx::query(
                            "INSERT INTO orgs (org_id, name, tier, encryption, seats, suspended, \
                             limits, wrapped_dek, master_key_id, created_at, idp_enrolled, retention_days) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                        )
                        .bind(o.org_id)
                        .bind(o.name)
                        .bind(o.tier)
                        .bind(o.encryption)
                        .bind(o.seats)
                        .bind(o.suspended)
                        .bind(o.limits)
                        .bind(o.wrapped_dek)
                        .bind(o.master_key_id)
                        .bind(o.created_at)
                        .bind(o.idp_enrolled)
                        .bind(o.retention_days)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::UpdateOrgSettings(record) => {
                        let o = OrgRow::from(record);
                        sqlx::query(
                            "UPDATE orgs SET tier = $2, seats = $3, suspended = $4, limits = $5, \
                             idp_enrolled = $6, retention_days = $7 WHERE org_id = $1",
                        )
                        .bind(o.org_id)
                        .bind(o.tier)
                        .bind(o.seats)
                        .bind(o.suspended)
                        .bind(o.limits)
                        .bind(o.idp_enrolled)
                        .bind(o.retention_days)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::InsertMember(m) => {
                        sqlx::query(
                            "INSERT INTO members (org_id, email, role, seated, profile_tags, joined_at) \
                             VALUES ($1, $2, $3, $4, $5, $6)",
                        )
                        .bind(&org)
                        .bind(&m.email)
                        .bind(m.role.as_str())
                        .bind(i64::from(m.seated))
                        .bind(serde_json::to_string(&m.profile_tags).unwrap_or_default())
                        .bind(m.joined_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::InsertKey(k) => {
                        sqlx::query(
                            "INSERT INTO api_keys (key_id, org_id, email, name, secret_hash, active, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        )
                        .bind(k.key_id.to_string())
                        .bind(&org)
                        .bind(&k.email)
                        .bind(&k.name)
                        .bind(k.secret_hash.clone())
                        .bind(i64::from(k.active))
                        .bind(k.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeactivateKey(key_id) => {
                        sqlx::query("UPDATE api_keys SET active = 0 WHERE org_id = $1 AND key_id = $2")
                            .bind(&org)
                            .bind(key_id.to_string())
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::UpdateMember(m) => {
                        sqlx::query(
                            "UPDATE members SET role = $3, seated = $4, profile_tags = $5 \
                             WHERE org_id = $1 AND email = $2",
                        )
                        .bind(&org)
                        .bind(&m.email)
                        .bind(m.role.as_str())
                        .bind(i64::from(m.seated))
                        .bind(serde_json::to_string(&m.profile_tags).unwrap_or_default())
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::UpsertTag(t) => {
                        sqlx::query(
                            "INSERT INTO tags (org_id, name, strict, is_default, description, created_by, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, name) DO UPDATE SET \
                             strict = excluded.strict, is_default = excluded.is_default, \
                             description = excluded.description",
                        )
                        .bind(&org)
                        .bind(&t.name)
                        .bind(i64::from(t.strict))
                        .bind(i64::from(t.is_default))
                        .bind(t.description.clone())
                        .bind(&t.created_by)
                        .bind(t.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteTag(name) => {
                        sqlx::query("DELETE FROM tags WHERE org_id = $1 AND name = $2")
                            .bind(&org)
                            .bind(name)
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::UpsertTeam(t) => {
                        sqlx::query(
                            "INSERT INTO teams (org_id, name, tags, description, idp_only, created_by, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, name) DO UPDATE SET \
                             tags = excluded.tags, description = excluded.description, \
                             idp_only = excluded.idp_only",
                        )
                        .bind(&org)
                        .bind(&t.name)
                        .bind(serde_json::to_string(&t.tags).unwrap_or_default())
                        .bind(t.description.clone())
                        .bind(i64::from(t.idp_only))
                        .bind(&t.created_by)
                        .bind(t.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteTeam(name) => {
                        sqlx::query("DELETE FROM team_members WHERE org_id = $1 AND team = $2")
                            .bind(&org)
                            .bind(name)
                            .execute($exec)
                            .await?;
                        sqlx::query("DELETE FROM teams WHERE org_id = $1 AND name = $2")
                            .bind(&org)
                            .bind(name)
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::UpsertMembership(m) => {
                        sqlx::query(
                            "INSERT INTO team_members (org_id, team, email, manual, idp, added_by, added_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, team, email) DO UPDATE SET \
                             manual = excluded.manual, idp = excluded.idp",
                        )
                        .bind(&org)
                        .bind(&m.team)
                        .bind(&m.email)
                        .bind(i64::from(m.manual))
                        .bind(i64::from(m.idp))
                        .bind(&m.added_by)
                        .bind(m.added_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteMembership { team, email } => {
                        sqlx::query("DELETE FROM team_members WHERE org_id = $1 AND team = $2 AND email = $3")
                            .bind(&org)
                            .bind(team)
                            .bind(email)
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::InsertWebhook { endpoint: e, secret } => {
                        let webhook = e.webhook_id.to_string();
                        sqlx::query(
                            "INSERT INTO webhooks (org_id, webhook_id, url, events, description, \
                             secret, secret_key_id, active, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                        )
                        .bind(&org)
                        .bind(&webhook)
                        .bind(&e.url)
                        .bind(serde_json::to_string(e.subscription.names()).unwrap_or_default())
                        .bind(&e.description)
                        .bind(&secret.bytes)
                        .bind(&secret.master_key_id)
                        .bind(i64::from(e.active))
                        .bind(e.created_at)
                        .execute($exec)
                        .await?;
                        // Its deliveries start after the org's last event
                        // committed so far (this commit's own events come
                        // after these statements, so they are delivered).
                        sqlx::query(
                            "INSERT INTO webhook_cursors (webhook_id, org_id, event_id, held_until) \
                             VALUES ($2, $1, COALESCE((SELECT MAX(event_id) FROM task_events \
                             WHERE org_id = $1), 0), 0)",
                        )
                        .bind(&org)
                        .bind(&webhook)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::InsertOutbox(events) => {
                        for e in events {
                            let t = e.transition.as_ref();
                            sqlx::query(
                                "INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, \
                                 sent, task_key, from_status, to_status, agent_id, created_at, \
                                 attempts, next_attempt_at) \
                                 VALUES ($1, $2, $3, $4, 0, $5, $6, $7, $8, $9, 0, $9)",
                            )
                            .bind(&org)
                            .bind(e.webhook_id.to_string())
                            .bind(&e.event_id)
                            .bind(e.types.text())
                            .bind(&e.task_key)
                            .bind(t.and_then(|t| t.from_status).map(|s| s.as_str()))
                            .bind(t.map(|t| t.to_status.as_str()))
                            .bind(t.map(|t| t.agent_id.clone()))
                            .bind(e.created_at)
                            .execute($exec)
                            .await?;
                        }
                    }
                    WriteOp::RotateWebhookSecret {
                        webhook_id,
                        secret,
                        previous_until,
                    } => {
                        // The right-hand sides read the row as it was.
                        sqlx::query(
                            "UPDATE webhooks SET previous_secret = secret, \
                             previous_secret_key_id = secret_key_id, previous_until = $3, \
                             secret = $4, secret_key_id = $5 WHERE org_id = $1 AND webhook_id = $2",
                        )
                        .bind(&org)
                        .bind(webhook_id.to_string())
                        .bind(previous_until)
                        .bind(&secret.bytes)
                        .bind(&secret.master_key_id)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DisableWebhook(webhook_id) | WriteOp::DeleteWebhook(webhook_id) => {
                        let webhook = webhook_id.to_string();
                        let endpoint = if matches!(op, WriteOp::DeleteWebhook(_)) {
                            "DELETE FROM webhooks WHERE org_id = $1 AND webhook_id = $2"
                        } else {
                            "UPDATE webhooks SET active = 0 WHERE org_id = $1 AND webhook_id = $2"
                        };
                        sqlx::query(endpoint)
                            .bind(&org)
                            .bind(&webhook)
                            .execute($exec)
                            .await?;
                        for pending in [
                            "DELETE FROM webhook_outbox WHERE org_id = $1 AND webhook_id = $2",
                            "DELETE FROM webhook_cursors WHERE org_id = $1 AND webhook_id = $2",
                        ] {
                            sqlx::query(pending)
                                .bind(&org)
                                .bind(&webhook)
                                .execute($exec)
                                .await?;
                        }
                        if matches!(op, WriteOp::DeleteWebhook(_)) {
                            sqlx::query(
                                "DELETE FROM webhook_deliveries WHERE org_id = $1 AND webhook_id = $2",
                            )
                            .bind(&org)
                            .bind(&webhook)
                            .execute($exec)
                            .await?;
                        }
                    }
                    WriteOp::UpsertSchedule(s) => {
                        sqlx::query(
                            "INSERT INTO schedules (org_id, schedule_id, name, cron, timezone, \
                             task, active, next_run_at, last_run_at, last_error, created_by, \
                             created_by_key, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                             ON CONFLICT (org_id, schedule_id) DO UPDATE SET cron = excluded.cron, \
                             timezone = excluded.timezone, task = excluded.task, \
                             active = excluded.active, next_run_at = excluded.next_run_at, \
                             last_run_at = excluded.last_run_at, last_error = excluded.last_error",
                        )
                        .bind(&org)
                        .bind(s.schedule_id.to_string())
                        .bind(&s.name)
                        .bind(s.cron.text())
                        .bind(s.zone.name())
                        .bind(&s.task)
                        .bind(i64::from(s.active))
                        .bind(s.next_run_at)
                        .bind(s.last_run_at)
                        .bind(&s.last_error)
                        .bind(&s.created_by)
                        .bind(&s.created_by_key)
                        .bind(s.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteSchedule(id) => {
                        sqlx::query("DELETE FROM schedules WHERE org_id = $1 AND schedule_id = $2")
                            .bind(&org)
                            .bind(id.to_string())
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::PruneTasks { task_ids, cutoff } if !task_ids.is_empty() => {
                        for sql in $crate::store::commit::prune::statements(task_ids.len()) {
                            let mut q = sqlx::query(&sql).bind(&org).bind(*cutoff);
                            for id in task_ids {
                                q = q.bind(id.to_string());
                            }
                            q.execute($exec).await?;
                        }
                    }
                    WriteOp::PruneTasks { .. } => {}
                    WriteOp::ShredOrg { at } => {
                        sqlx::query($crate::store::commit::purge::MARK_DELETED)
                            .bind(&org)
                            .bind(*at)
                            .execute($exec)
                            .await?;
                        for sql in $crate::store::commit::purge::shred() {
                            sqlx::query(&sql).bind(&org).execute($exec).await?;
                        }
                    }
                    WriteOp::PurgeOrg | WriteOp::DropOrg => {
                        let statements = if matches!(op, WriteOp::PurgeOrg) {
                            $crate::store::commit::purge::step()
                        } else {
                            $crate::store::commit::purge::drop_row()
                        };
                        for sql in statements {
                            sqlx::query(&sql).bind(&org).execute($exec).await?;
                        }
                    }
                    WriteOp::InsertTasks(_)
                    | WriteOp::SaveUsage(_)
                    | WriteOp::UpdateHeader { .. }
                    | WriteOp::SetContent { .. }
                    | WriteOp::InsertEvents(_)
                    | WriteOp::SettleDeliveries(_) => unreachable!("task ops are planned apart"),
                }
            }
        }
    }};
}

pub(super) use account_statements;
