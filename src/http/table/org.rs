//! An org's administration (quota, members, teams, tags, settings) and a
//! member's own keys.

use taskq_actors::api::*;
use taskq_actors::Caller;

use super::super::operation::Operation;
use super::super::AppState;

type S = AppState;
type C = Caller;
const TEAM: Option<&str> = Some(TEAMS);

pub(super) fn admin() -> Vec<Operation> {
    vec![
        // ---- org administration
        Operation::get("/quota")
            .doc("get_quota", "org", "This month's task quota")
            .tool("This month's task quota: limit, used, remaining and when it resets.")
            .read_only()
            .reads(None)
            .answer::<QuotaView>(200, "Limit, used, remaining and when it resets")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.quota(&c).await }),
        Operation::post("/feedback")
            .doc("send_feedback", "org", "Send product feedback to the service's operators")
            .tool("Send product feedback (bug, feature or general) to the service's operators. Returns the id of the task it became.")
            .writes(None)
            .body()
            .answer::<FeedbackFiled>(201, "The feedback was filed as a task")
            .member(|s: S, c: C, (): (), r: SendFeedback| async move { s.engine.send_feedback(&c, r).await }),
        Operation::get("/tags")
            .doc("list_tags", "tags", "The org's tag vocabulary")
            .tool("List the org's tag vocabulary: each tag's name, whether it is strict or a default, and its description.")
            .read_only()
            .reads(None)
            .answer::<Vec<TagView>>(200, "Every tag")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_tags(&c).await }),
        Operation::post("/tags")
            .doc("create_tags", "tags", "Add tags to the vocabulary")
            .tool("Add tags to the org's vocabulary (admins and owners). A strict tag needs a description.")
            .writes(None)
            .body()
            .answer::<TagsCreated>(201, "The tags were added")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateTags| async move { s.engine.create_tags(&c, r).await }),
        Operation::post("/tags/update")
            .doc("update_tags", "tags", "Change tags of the vocabulary")
            .tool("Change tags of the vocabulary: strict, default or description (admins and owners).")
            .writes(None)
            .body()
            .answer::<TagsUpdated>(200, "The tags were changed")
            .errors(&[404, 409])
            .member(|s: S, c: C, (): (), r: UpdateTags| async move { s.engine.update_tags(&c, r).await }),
        Operation::post("/tags/delete")
            .doc("delete_tags", "tags", "Remove tags from the vocabulary")
            .tool("Remove tags from the org's vocabulary by name (admins and owners).")
            .writes(None)
            .body()
            .answer::<TagsDeleted>(200, "The tags were removed")
            .errors(&[404, 409])
            .member(|s: S, c: C, (): (), r: DeleteTags| async move { s.engine.delete_tags(&c, r).await }),
        Operation::get("/members")
            .doc("list_members", "members", "The org's members")
            .tool("List the org's members with their role, profile tags, team tags and seat.")
            .read_only()
            .reads(None)
            .answer::<Vec<MemberView>>(200, "Every member")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_members(&c).await }),
        Operation::patch("/members/{email}")
            .doc("update_member", "members", "Change a member's role, profile tags or seat")
            .tool("Change a member's role, profile tags or seat (admins and owners). Returns the member.")
            .writes(None)
            .body()
            .answer::<MemberView>(200, "The member")
            .errors(&[409])
            .member(|s: S, c: C, email: String, r: MemberPatch| async move { s.engine.patch_member(&c, &email, r).await }),
        Operation::get("/me")
            .doc("get_me", "members", "Who the key belongs to")
            .tool("Who the key belongs to: email, role and profile tags.")
            .read_only()
            .reads(None)
            .answer::<MeView>(200, "The caller's member")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.me(&c).await }),
        Operation::patch("/me")
            .doc("update_me", "members", "Set your own profile tags")
            .tool("Set your own profile tags (users cannot give themselves strict tags). Returns your member record.")
            .writes(None)
            .body()
            .answer::<MemberView>(200, "The caller's member")
            .member(|s: S, c: C, (): (), r: MePatch| async move { s.engine.patch_me(&c, r).await }),
        Operation::get("/teams")
            .doc("list_teams", "teams", "The org's teams")
            .tool("List the org's teams and the tags they give their members (paid plans).")
            .read_only()
            .reads(TEAM)
            .answer::<Vec<TeamView>>(200, "Every team")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_teams(&c).await }),
        Operation::post("/teams")
            .doc("create_team", "teams", "Create a team whose tags its members inherit")
            .tool("Create a team whose tags its members inherit (admins and owners, paid plans).")
            .writes(TEAM)
            .body()
            .answer::<TeamView>(201, "The team")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: NewTeam| async move { s.engine.create_team(&c, r).await }),
        Operation::get("/teams/{name}")
            .doc("get_team", "teams", "One team with its members")
            .tool("Fetch one team with its members and where each membership comes from (paid plans).")
            .read_only()
            .reads(TEAM)
            .answer::<TeamDetail>(200, "The team")
            .member(|s: S, c: C, name: String, _: NoArguments| async move { s.engine.get_team(&c, &name).await }),
        Operation::patch("/teams/{name}")
            .doc("update_team", "teams", "Change a team's tags, description or idp_only flag")
            .tool("Change a team's tags, description or idp_only flag (admins and owners, paid plans).")
            .writes(TEAM)
            .body()
            .answer::<TeamView>(200, "The team")
            .errors(&[409])
            .member(|s: S, c: C, name: String, r: TeamPatch| async move { s.engine.patch_team(&c, &name, r).await }),
        Operation::delete("/teams/{name}")
            .doc("delete_team", "teams", "Delete a team and its memberships")
            .tool("Delete a team and its memberships (admins and owners, paid plans).")
            .writes(TEAM)
            .empty(204, "The team is gone")
            .member(|s: S, c: C, name: String, _: NoArguments| async move { s.engine.delete_team(&c, &name).await }),
        Operation::post("/teams/{name}/members")
            .doc("add_team_member", "teams", "Add a member to a team by hand")
            .tool("Add a member to a team by hand (admins and owners, paid plans). Returns the membership.")
            .writes(TEAM)
            .body()
            .answer::<TeamMemberView>(201, "The membership")
            .errors(&[409])
            .member(|s: S, c: C, name: String, r: AddTeamMember| async move { s.engine.add_team_member(&c, &name, r).await }),
        Operation::delete("/teams/{name}/members/{email}")
            .doc("remove_team_member", "teams", "Remove a member's manual membership of a team")
            .tool("Remove a member's manual membership of a team (admins and owners, paid plans).")
            .writes(TEAM)
            .empty(204, "The membership is gone")
            .errors(&[409])
            .member(|s: S, c: C, (name, email): (String, String), _: NoArguments| async move {
                s.engine.remove_team_member(&c, &name, &email).await
            }),
    ]
}

pub(super) fn keys() -> Vec<Operation> {
    vec![
        // ---- a member's keys
        Operation::post("/keys")
            .doc(
                "create_key",
                "keys",
                "Create a key for the caller's member; the secret is shown once",
            )
            .writes(None)
            .body()
            .answer::<KeyCreated>(201, "The key and its secret")
            .errors(&[409])
            .member(
                |s: S, c: C, (): (), r: CreateKey| async move { s.engine.create_key(&c, r).await },
            ),
        Operation::get("/keys")
            .doc("list_keys", "keys", "The caller's member's keys")
            .reads(None)
            .answer::<KeyList>(200, "Every key, active or not")
            .member(
                |s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_keys(&c).await },
            ),
        Operation::delete("/keys/{key_id}")
            .doc(
                "revoke_key",
                "keys",
                "Revoke a key; it stops working at once",
            )
            .writes(None)
            .empty(204, "The key is revoked")
            .member(|s: S, c: C, key_id: String, _: NoArguments| async move {
                s.engine.revoke_key(&c, &key_id).await
            }),
    ]
}
