//! The operator's operations: orgs, the cluster, stats, and the operator page.

use taskq_actors::api::*;
use taskq_actors::parse_org_id;

use super::super::operation::{Access, Operation};
use super::super::AppState;
use super::super::{admin, ui, ApiError};
use Access::Operator;

type S = AppState;

pub(super) fn operations() -> Vec<Operation> {
    vec![
        // ---- operator
        Operation::post("/admin/orgs")
            .doc("create_org", "operator", "Create an org with its owner and the owner's first key")
            .access(Operator)
            .body()
            .answer::<CreatedOrg>(201, "The org and its owner's key")
            .errors(&[403, 409])
            .operator(|s: S, (): (), r: CreateOrg| async move { s.engine.create_org(r).await }),
        Operation::get("/admin/orgs/{org_id}")
            .doc("get_org", "operator", "An org with its effective limits, and how many tasks and events the store holds of it; while its deletion runs, how many are left")
            .access(Operator)
            .answer::<OrgAnswer>(200, "The org, or, while its deletion runs, `deleting: true` and what is left of it")
            .operator(|s: S, org: String, _: NoArguments| async move { s.engine.get_org(parse_org_id(&org)?).await }),
        Operation::patch("/admin/orgs/{org_id}")
            .doc("patch_org", "operator", "Change an org's tier, seats, suspension or limits")
            .access(Operator)
            .body()
            .answer::<OrgView>(200, "The org")
            .errors(&[409])
            .operator(|s: S, org: String, r: PatchOrg| async move { s.engine.patch_org(parse_org_id(&org)?, r).await }),
        Operation::delete("/admin/orgs/{org_id}")
            .doc("delete_org", "operator", "Delete an org: its keys are refused and its data key destroyed at once, its rows removed in the background")
            .access(Operator)
            .answer::<OrgDeleting>(202, "The org is being deleted (again while its rows are removed)")
            .errors(&[409])
            .operator(|s: S, org: String, _: NoArguments| async move { s.engine.delete_org(parse_org_id(&org)?).await }),
        Operation::get("/admin/orgs/{org_id}/export")
            .doc("export_org", "operator", "Everything an org holds, one JSON object a line: org, tags, teams, members, schedules, webhooks, tasks with their history")
            .access(Operator)
            .ndjson(200, "The org's records, streamed")
            .errors(&[409])
            .handler(admin::export_org),
        Operation::post("/admin/orgs/{org_id}/members")
            .doc("add_member", "operator", "Add an active member and issue its first key")
            .access(Operator)
            .body()
            .answer::<AddedMember>(201, "The member and its key")
            .errors(&[403, 409, 429])
            .operator(|s: S, org: String, r: AddMember| async move { s.engine.add_member(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/members/{email}/keys")
            .doc("reset_key", "operator", "Issue a member a new key (the key reset)")
            .access(Operator)
            .body()
            .answer::<IssuedKey>(201, "The new key")
            .errors(&[403, 409])
            .operator(|s: S, (org, email): (String, String), r: ResetKey| async move {
                s.engine.reset_key(parse_org_id(&org)?, &email, r).await
            }),
        Operation::post("/admin/members/unblock")
            .doc("unblock_member", "operator", "Lift a member's strike block")
            .access(Operator)
            .body()
            .answer::<Unblocked>(200, "The block is lifted")
            .operator(|s: S, (): (), r: UnblockMember| async move { s.engine.unblock_member(r).await }),
        Operation::get("/admin/feedback")
            .doc("feedback_org", "operator", "The org that receives feedback")
            .access(Operator)
            .answer::<FeedbackOrg>(200, "The feedback org's id")
            .operator(|s: S, (): (), _: NoArguments| async move { Ok::<_, ApiError>(s.engine.feedback_org()) }),
        Operation::post("/admin/orgs/{org_id}/idp")
            .doc("set_idp", "operator", "Turn the identity-provider enrollment on or off")
            .access(Operator)
            .body()
            .answer::<IdpEnrollment>(200, "The enrollment")
            .errors(&[409])
            .operator(|s: S, org: String, r: IdpEnrollment| async move { s.engine.set_idp_enrollment(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/idp/sync")
            .doc("idp_sync", "operator", "The identity provider's view of team membership")
            .access(Operator)
            .body()
            .answer::<IdpSyncAnswer>(200, "Memberships added and removed")
            .errors(&[403, 409])
            .operator(|s: S, org: String, r: IdpSync| async move { s.engine.idp_sync(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/recompute")
            .doc("recompute_reports", "operator", "Compute an org's reports now instead of waiting for the schedule")
            .access(Operator)
            .body()
            .answer::<Recomputed>(200, "The reports computed (those that apply to the org's plan and encryption)")
            .errors(&[409, 503])
            .operator(|s: S, org: String, r: Recompute| async move { s.engine.recompute(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/master-key/rotate")
            .doc("rotate_master_key", "operator", "Make a new master key current and re-wrap every data key")
            .access(Operator)
            .body()
            .answer::<MasterKeyRotated>(200, "Every data key is wrapped by the new key")
            .errors(&[409])
            .operator(|s: S, (): (), r: RotateMasterKey| async move { admin::rotate_master_key(s, r).await }),
        Operation::get("/admin/cluster")
            .doc("cluster", "operator", "The nodes of the cluster and the orgs each owns now")
            .access(Operator)
            .answer::<ClusterView>(200, "The nodes seen in the last minute")
            .operator(|s: S, (): (), _: NoArguments| async move { s.engine.cluster_view().await }),
        Operation::get("/admin/stats")
            .doc("operator_stats", "operator", "What the operator page shows: orgs' open tasks and leases, actors, group commits, limit refusals")
            .access(Access::OperatorOrSession)
            .answer::<OperatorStats>(200, "The figures, from memory")
            .handler(ui::stats),
        // ---- the operator page (HTML)
        Operation::get("/admin/ui")
            .doc("operator_page", "operator", "The operator page; without a session, its sign-in form")
            .html(200, "The page, for a signed-in operator")
            .html(401, "The sign-in form")
            .errors(&[404])
            .handler(ui::page),
        Operation::post("/admin/ui/login")
            .doc("operator_login", "operator", "Sign in to the operator page with the operator token")
            .form::<ui::LoginForm>()
            .empty(303, "Signed in: the session cookie is set and the page follows")
            .html(401, "A wrong token: the form again, no cookie")
            .html(429, "Too many wrong operator tokens from this address: the form again, no cookie, and `Retry-After`")
            .errors(&[404])
            .handler(ui::login),
        Operation::post("/admin/ui/logout")
            .doc("operator_logout", "operator", "End the operator page's session")
            .empty(303, "Signed out: the cookie is cleared and the form follows")
            .errors(&[404])
            .handler(ui::logout),
    ]
}
